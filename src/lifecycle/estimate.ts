// When to come back (docs/lifecycle.md, "Retry-After"): the proxy's own
// estimates for the Retry-After of a 409 in-flight and of a 503
// store-unavailable, instead of the lease or a constant.

const ALPHA = 0.3;

/**
 * A route's recent upstream durations as an exponentially weighted moving
 * average, updated when a recorded exchange ends (two number writes, no
 * allocation). A 409's Retry-After is that average in whole seconds, at
 * least 1 and at most what is left of the lease; with no exchange seen yet
 * it is 1 (the client comes back soon and asks again).
 */
export class DurationEstimate {
  private avgMs = 0;
  private seen = false;

  observe(ms: number): void {
    if (!(ms >= 0)) return;
    this.avgMs = this.seen ? this.avgMs + ALPHA * (ms - this.avgMs) : ms;
    this.seen = true;
  }

  /** Seconds until the request holding the key is expected to be done, within [1, leaseLeftS]. */
  retryAfterS(leaseLeftS: number): number {
    const est = this.seen ? Math.ceil(this.avgMs / 1000) : 1;
    return Math.max(1, Math.min(est, Math.ceil(leaseLeftS)));
  }
}

/** The longest a 503 store-unavailable asks a client to wait. */
export const STORE_RETRY_MAX_S = 30;

/**
 * The key store's health as the request path sees it. An outage that has
 * lasted d seconds is expected to last about d more (backoff that grows with
 * the outage, like a breaker's): a 503's Retry-After is the outage's age so
 * far, at least 1 s, at most STORE_RETRY_MAX_S. Any store answer ends it.
 */
export class StoreHealth {
  private downSince = -1;

  up(): void {
    this.downSince = -1;
  }

  down(now = performance.now()): void {
    if (this.downSince < 0) this.downSince = now;
  }

  retryAfterS(now = performance.now()): number {
    if (this.downSince < 0) return 1;
    return Math.max(1, Math.min(STORE_RETRY_MAX_S, Math.ceil((now - this.downSince) / 1000)));
  }
}
