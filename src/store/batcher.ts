import { StoreUnavailableError } from './db/port.js';

// Group commit for statements: requests that arrive together share one round
// trip and one durable commit. A batch is sent at the end of the event loop's
// current turn (setImmediate), so every request whose bytes came in the same
// poll joins it; requests that arrive while `maxInFlight` statements are
// running wait for the next one. No timer: an idle proxy sends within the
// same turn, with no added latency. Items with equal `key(item)` never share
// a batch (one statement must not touch the same row twice); the later one
// waits for the next batch.
//
// With `timeoutMs` (store.timeout), a request's wait for a statement slot
// counts against its bound: a batch is sent with what is left of its oldest
// request's budget, and a request still queued when its budget is spent is
// refused (StoreUnavailableError) without being sent. A store that hangs
// answers every request within the bound, however many wait behind it.

export interface BatcherOptions<I, O> {
  /** `budgetMs`: what is left of the oldest item's timeout (undefined without one). */
  readonly run: (items: readonly I[], budgetMs: number | undefined) => Promise<readonly O[]>;
  readonly key?: (item: I) => string;
  readonly maxBatch: number;
  readonly maxInFlight: number;
  readonly timeoutMs?: number | null;
}

interface Pending<I, O> {
  readonly item: I;
  readonly resolve: (o: O) => void;
  readonly reject: (e: unknown) => void;
  /** performance.now() at submit. */
  readonly at: number;
}

export class Batcher<I, O> {
  private queue: Pending<I, O>[] = [];
  private inFlight = 0;
  private scheduled = false;
  private readonly opts: BatcherOptions<I, O>;
  private readonly flushScheduled = (): void => {
    this.scheduled = false;
    // More than maxBatch in one turn: as many statements as may run at once.
    while (this.queue.length > 0 && this.inFlight < this.opts.maxInFlight) this.flush();
  };

  constructor(opts: BatcherOptions<I, O>) {
    this.opts = opts;
  }

  submit(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, resolve, reject, at: performance.now() });
      this.schedule();
    });
  }

  /**
   * Sends at the end of this turn of the event loop (setImmediate: right after
   * the I/O callbacks of the current poll, never a timer), so that requests
   * whose bytes arrived in the same poll share one statement.
   */
  private schedule(): void {
    if (this.scheduled || this.inFlight >= this.opts.maxInFlight) return;
    this.scheduled = true;
    setImmediate(this.flushScheduled);
  }

  private flush(): void {
    const budget = this.expire();
    if (this.queue.length === 0) return;
    const batch = this.take();
    this.inFlight++;
    let settled: Promise<void>;
    try {
      settled = this.opts.run(batch.map((p) => p.item), budget === undefined ? undefined : budget - (performance.now() - batch[0]!.at)).then(
        (results) => {
          for (let i = 0; i < batch.length; i++) batch[i]!.resolve(results[i]!);
        },
        (err) => {
          for (const p of batch) p.reject(err);
        },
      );
    } catch (err) {
      for (const p of batch) p.reject(err);
      settled = Promise.resolve();
    }
    void settled.finally(() => {
      this.inFlight--;
      if (this.queue.length > 0) this.schedule();
    });
  }

  /** Refuses the queued items whose budget is spent (a prefix: the queue is in submit order). */
  private expire(): number | undefined {
    const ms = this.opts.timeoutMs ?? undefined;
    if (ms === undefined || this.queue.length === 0) return ms;
    const now = performance.now();
    let n = 0;
    while (n < this.queue.length && now - this.queue[n]!.at >= ms) n++;
    if (n === 0) return ms;
    const err = new StoreUnavailableError(`no answer from the key store within ${ms} ms (store.timeout): statements ahead of this one did not return`);
    for (const p of this.queue.splice(0, n)) p.reject(err);
    return ms;
  }

  private take(): Pending<I, O>[] {
    const { maxBatch, key } = this.opts;
    if (key === undefined || this.queue.length === 1) {
      return this.queue.splice(0, maxBatch);
    }
    const seen = new Set<string>();
    const batch: Pending<I, O>[] = [];
    const rest: Pending<I, O>[] = [];
    for (const p of this.queue) {
      const k = key(p.item);
      if (batch.length < maxBatch && !seen.has(k)) {
        seen.add(k);
        batch.push(p);
      } else {
        rest.push(p);
      }
    }
    this.queue = rest;
    return batch;
  }
}
