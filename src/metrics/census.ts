import { Gauge, type Registry } from 'prom-client';

// The two gauges of the key census (src/admin/census.ts): outcome-unknown
// keys and the age of the oldest in-flight key, as of the last complete pass
// over the table. Read when scraped; the request path never touches them.
export class KeyCensusGauges {
  #outcomeUnknown = 0;
  /** performance.now() at which the oldest in-flight key was created; null: none. */
  #oldestBornAt: number | null = null;

  constructor(registers: Registry[]) {
    const self = this;
    new Gauge({
      name: 'idempotency_proxy_keys_outcome_unknown',
      help: 'Keys whose outcome is unknown (they wait for an operator: keys list --state outcome_unknown), as of the last key census',
      registers,
      collect() { this.set(self.#outcomeUnknown); },
    });
    new Gauge({
      name: 'idempotency_proxy_oldest_in_flight_age_seconds',
      help: 'Age of the oldest key in flight (0: none), as of the last key census, counted on since',
      registers,
      collect() { this.set(self.#oldestBornAt === null ? 0 : Math.max(0, (performance.now() - self.#oldestBornAt) / 1000)); },
    });
  }

  publish(outcomeUnknown: number, oldestBornAt: number | null): void {
    this.#outcomeUnknown = outcomeUnknown;
    this.#oldestBornAt = oldestBornAt;
  }
}
