import { Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { KeyCensusGauges } from './census.js';
import { FastCounter, FastHistogram } from './fast.js';

// Our own registry (no prom-client globals). One name per phase, as in the
// logs and docs/operations.md. Counters and histograms are the light ones of
// ./fast.ts (the request path updates several per request); gauges and the
// process metrics are prom-client's.

/** A request's outcome: its log line's `outcome` and the `outcome` label (docs/lifecycle.md). */
export const OUTCOMES = [
  'executed', 'replayed', 'conflict', 'mismatch', 'rejected', 'passthrough', 'store_error', 'upstream_error', 'internal_error',
] as const;
export type Outcome = (typeof OUTCOMES)[number];

export interface Metrics {
  readonly registry: Registry;
  readonly requests: FastCounter<'route' | 'outcome'>;
  readonly requestDuration: FastHistogram<'route' | 'outcome'>;
  readonly upstreamDuration: FastHistogram<'route'>;
  readonly storeDuration: FastHistogram<'op'>;
  readonly storeErrors: FastCounter<'op'>;
  readonly cache: FastCounter<'result'>;
  readonly cacheBreakerOpen: Gauge;
  readonly inFlight: InFlightGauge;
  readonly bufferedBytes: SampledGauge;
  readonly leaseTakeovers: FastCounter<'route'>;
  readonly leaseLost: FastCounter<'route'>;
  readonly sweeperDeleted: FastCounter;
  readonly shadowDecisions: FastCounter<'route' | 'decision'>;
  /** Outcome probes sent after a lease takeover (onExpiredLease: probe), by result: found, absent, failed. */
  readonly probes: FastCounter<'route' | 'result'>;
  readonly failures: FastCounter<'route' | 'phase' | 'source'>;
  readonly batchSize: FastHistogram<'statement'>;
  /** TLS handshakes the listener refused, by reason (src/ops/tls-refusals.ts). */
  readonly tlsRefused: FastCounter<'reason'>;
  /** Spans tracing dropped, by cause: queue_full, export_failed (src/tracing/recorder.ts). */
  readonly tracingSpansLost: FastCounter<'cause'>;
  /** The upstream connection pool, read when scraped. */
  readonly upstreamPool: UpstreamPoolGauges;
  /** Keys waiting to be given back once the store answers (src/lifecycle/give-back.ts), read when scraped. */
  readonly keysToGiveBack: SampledGauge;
  /** Set by the key census (src/admin/census.ts), not per request. */
  readonly keyCensus: KeyCensusGauges;
}

/**
 * The keys-in-flight gauge, also readable synchronously: graceful shutdown
 * waits for it to reach zero (every claimed request committed or released).
 * A plain number on the request path; prom-client reads it when scraped.
 */
export class InFlightGauge {
  #count = 0;
  #idle: Array<() => void> = [];

  constructor(cfg: { name: string; help: string; registers: Registry[] }) {
    const self = this;
    new Gauge({ ...cfg, collect() { this.set(self.#count); } });
  }

  inc(): void {
    this.#count++;
  }

  dec(): void {
    this.#count--;
    if (this.#count <= 0 && this.#idle.length > 0) for (const fn of this.#idle.splice(0)) fn();
  }

  get count(): number {
    return this.#count;
  }

  /** Resolves once no key is in flight. */
  whenIdle(): Promise<void> {
    if (this.#count <= 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }
}

/** A gauge read when scraped, from a number the composition root owns (`watch`). */
export class SampledGauge {
  #read: () => number = () => 0;

  constructor(cfg: { name: string; help: string; registers: Registry[] }) {
    const self = this;
    new Gauge({ ...cfg, collect() { this.set(self.#read()); } });
  }

  watch(read: () => number): void {
    this.#read = read;
  }
}

/** What the upstream connection pool holds right now (undici's Pool#stats). */
export interface PoolCounts {
  /** Open connections. */
  readonly connected: number;
  /** Open connections with no request on them. */
  readonly free: number;
  /** Requests handed to the pool and not yet written: waiting for a connection (or for theirs to open). */
  readonly pending: number;
}

/**
 * The upstream pool's connections (busy, idle) and the requests waiting for one, read when scraped: nothing on
 * the request path. Requests waiting mean every connection is busy; on idempotent routes their wait counts
 * against upstream.timeout (src/proxy/record-handler.ts).
 */
export class UpstreamPoolGauges {
  #read: () => PoolCounts = () => ({ connected: 0, free: 0, pending: 0 });

  constructor(registers: Registry[]) {
    const self = this;
    new Gauge({
      name: 'idempotency_proxy_upstream_connections', help: 'Connections to the upstream, by state: busy (a request on it), idle', labelNames: ['state'], registers,
      collect() {
        const c = self.#read();
        this.set({ state: 'busy' }, c.connected - c.free);
        this.set({ state: 'idle' }, c.free);
      },
    });
    new Gauge({
      name: 'idempotency_proxy_upstream_requests_waiting', help: 'Requests waiting for a connection to the upstream (all upstream.connections busy)', registers,
      collect() { this.set(self.#read().pending); },
    });
  }

  watch(read: () => PoolCounts): void {
    this.#read = read;
  }
}

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

export function createMetrics(opts: { processMetrics?: boolean } = {}): Metrics {
  const registry = new Registry();
  // Event-loop lag sampled every 100 ms, not prom-client's 10 ms: a timer
  // waking an idle sidecar 100 times a second cost it 2 % of a CPU.
  if (opts.processMetrics ?? true) collectDefaultMetrics({ register: registry, prefix: 'idempotency_proxy_', eventLoopMonitoringPrecision: 100 });
  const registers = [registry];
  return {
    registry,
    requests: new FastCounter({ name: 'idempotency_proxy_requests_total', help: 'Requests by route and outcome', labelNames: ['route', 'outcome'], registers }),
    requestDuration: new FastHistogram({ name: 'idempotency_proxy_request_duration_seconds', help: 'Whole request, from first byte to response end', labelNames: ['route', 'outcome'], buckets: LATENCY_BUCKETS, registers }),
    upstreamDuration: new FastHistogram({ name: 'idempotency_proxy_upstream_duration_seconds', help: 'Upstream exchange, request sent to response end', labelNames: ['route'], buckets: LATENCY_BUCKETS, registers }),
    storeDuration: new FastHistogram({ name: 'idempotency_proxy_store_duration_seconds', help: 'Key store operations', labelNames: ['op'], buckets: LATENCY_BUCKETS, registers }),
    storeErrors: new FastCounter({ name: 'idempotency_proxy_store_errors_total', help: 'Key store operations that failed', labelNames: ['op'], registers }),
    cache: new FastCounter({ name: 'idempotency_proxy_cache_total', help: 'Redis lookaside results: hit, miss, error, skipped (breaker open)', labelNames: ['result'], registers }),
    cacheBreakerOpen: new Gauge({ name: 'idempotency_proxy_cache_breaker_open', help: '1 while the Redis circuit breaker is open', registers }),
    inFlight: new InFlightGauge({ name: 'idempotency_proxy_keys_in_flight', help: 'Keys this instance holds claimed right now', registers }),
    bufferedBytes: new SampledGauge({ name: 'idempotency_proxy_buffered_bytes', help: 'Request bodies and recorded responses held in memory now (limits.maxBufferedBytes)', registers }),
    leaseTakeovers: new FastCounter({ name: 'idempotency_proxy_lease_takeovers_total', help: 'Claims that took over an expired lease (a previous holder crashed or stalled)', labelNames: ['route'], registers }),
    leaseLost: new FastCounter({ name: 'idempotency_proxy_lease_lost_total', help: 'Commits or lease extensions fenced out because the lease was taken over', labelNames: ['route'], registers }),
    sweeperDeleted: new FastCounter({ name: 'idempotency_proxy_sweeper_deleted_total', help: 'Expired records deleted by the sweeper', registers }),
    shadowDecisions: new FastCounter({ name: 'idempotency_proxy_shadow_decisions_total', help: 'What enforcement would have done on shadow routes', labelNames: ['route', 'decision'], registers }),
    probes: new FastCounter({ name: 'idempotency_proxy_outcome_probes_total', help: 'Outcome probes sent after a lease takeover (onExpiredLease: probe): found (replayed), absent (executed), failed (409 outcome-unknown)', labelNames: ['route', 'result'], registers }),
    failures: new FastCounter({ name: 'idempotency_proxy_failures_total', help: 'Requests that ended in a failure, by the phase where it ended and who failed (store, upstream, internal)', labelNames: ['route', 'phase', 'source'], registers }),
    batchSize: new FastHistogram({ name: 'idempotency_proxy_store_batch_size', help: 'Requests per batched claim/commit statement', labelNames: ['statement'], buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256], registers }),
    tlsRefused: new FastCounter({ name: 'idempotency_proxy_tls_handshakes_refused_total', help: 'TLS handshakes the listener refused or that did not finish, by reason', labelNames: ['reason'], registers }),
    tracingSpansLost: new FastCounter({ name: 'idempotency_proxy_tracing_spans_lost_total', help: 'Spans tracing dropped: queue_full (OTEL_BSP_MAX_QUEUE_SIZE spans not yet exported), export_failed (the collector refused or did not answer)', labelNames: ['cause'], registers }),
    upstreamPool: new UpstreamPoolGauges(registers),
    keysToGiveBack: new SampledGauge({ name: 'idempotency_proxy_keys_to_give_back', help: 'Keys waiting to be given back once the key store answers: releases and lost claims of requests that ran nothing', registers }),
    keyCensus: new KeyCensusGauges(registers),
  };
}

