// A consecutive-failure circuit breaker for an optional dependency (Redis).
//
//   closed ──(threshold consecutive failures)──▶ open
//   open ──(cool-down elapsed: one probe call allowed)──▶ half-open
//   half-open ──(probe succeeds)──▶ closed;  ──(probe fails)──▶ open again
//
// While open, callers skip the dependency entirely (no timeout paid). The
// clock is injected so the behaviour can be tested without sleeping.

export type BreakerState = 'closed' | 'open' | 'half_open';

export interface BreakerOptions {
  /** Consecutive failures (errors or timeouts) that open the breaker. */
  readonly threshold: number;
  /** How long the breaker stays open before one probe call is let through. */
  readonly coolDownMs: number;
  /** Called on every transition into or out of "open" (half-open counts as open). */
  readonly onChange?: (open: boolean) => void;
  readonly now?: () => number;
}

export class CircuitBreaker {
  private failures = 0;
  private openUntil = 0;
  private probing = false;
  private current: BreakerState = 'closed';
  private readonly threshold: number;
  private readonly coolDownMs: number;
  private readonly onChange: (open: boolean) => void;
  private readonly now: () => number;

  constructor(opts: BreakerOptions) {
    if (!Number.isInteger(opts.threshold) || opts.threshold < 1) throw new RangeError('breaker threshold must be an integer >= 1');
    if (!(opts.coolDownMs >= 0)) throw new RangeError('breaker coolDownMs must be >= 0');
    this.threshold = opts.threshold;
    this.coolDownMs = opts.coolDownMs;
    this.onChange = opts.onChange ?? (() => {});
    this.now = opts.now ?? Date.now;
  }

  get state(): BreakerState {
    return this.current;
  }

  /** May a call go to the dependency now? In half-open, only one probe at a time. */
  allow(): boolean {
    if (this.current === 'closed') return true;
    if (this.probing) return false;
    if (this.now() < this.openUntil) return false;
    this.current = 'half_open';
    this.probing = true;
    return true;
  }

  success(): void {
    this.failures = 0;
    if (this.current === 'closed') return;
    this.current = 'closed';
    this.probing = false;
    this.onChange(false);
  }

  failure(): void {
    if (this.current === 'closed') {
      if (++this.failures < this.threshold) return;
      this.trip();
      this.onChange(true);
      return;
    }
    // A failed probe (or a late failure of a call let through before opening).
    this.trip();
  }

  /** The dependency says it is back (e.g. reconnected): let the next call probe at once. */
  probeNow(): void {
    if (this.current !== 'closed' && !this.probing) this.openUntil = 0;
  }

  private trip(): void {
    this.current = 'open';
    this.probing = false;
    this.failures = 0;
    this.openUntil = this.now() + this.coolDownMs;
  }
}
