// limits.maxBufferedBytes: one budget for the request bodies and recorded
// responses that all requests together hold in memory. A new request is
// admitted only while its body fits (docs/configuration.md, limits): past
// the budget it is refused with 503 + Retry-After before anything is claimed.
// A response already being recorded is never refused: it belongs to an
// operation that ran, so its bytes are counted and the next requests wait.

export class MemoryBudget {
  private used = 0;

  constructor(readonly limit: number) {}

  /** Bytes held now. */
  get held(): number {
    return this.used;
  }

  /** Takes n bytes if they fit; false (nothing taken) if they do not. */
  tryTake(n: number): boolean {
    if (this.used + n > this.limit) return false;
    this.used += n;
    return true;
  }

  /** Takes n bytes whether they fit or not (a response being recorded). */
  take(n: number): void {
    this.used += n;
  }

  give(n: number): void {
    this.used -= n;
  }
}
