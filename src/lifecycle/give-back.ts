import { StoreUnavailableError, isRolledBack } from '../errors.js';
import type { Logger } from '../log/logger.js';
import type { Metrics } from '../metrics/metrics.js';
import type { ReplayCache } from '../store/cache.js';
import type { KeyStore } from '../store/key-store.js';
import type { ClaimRequest } from '../store/records.js';
import { storeBackoffMs, storePatienceMs } from './store-patience.js';

// Keys given back after the request was answered, while the key store is
// down. The request is never held for it: its answer does not depend on it.
// Left claimed, a key would stay in flight until its lease ends (90 s by
// default: every retry meanwhile gets 409), with nobody to give it back, and
// on an `onExpiredLease: fail` route the next retry would then find it
// outcome_unknown, for an operator to resolve, though nothing ran.
//
// - `release`: the key is known to bind no answer (nothing was sent, or the
//   upstream answered a status the route releases on): KeyStore.release.
// - `abandon`: a claim whose reply was lost may have claimed the key for a
//   request answered 503 without running anything: KeyStore.abandon gives it
//   back as the claim found it. Not found, it is looked for again now and
//   then: a claim the proxy stopped waiting for can still commit later.
//
// Both are fenced by the owner token and the in_flight state: once another
// claim took the key over (or made it outcome_unknown) they change nothing.
// One statement at a time, whatever the number of keys waiting, so that an
// outage that left thousands of them never crowds the requests' own
// statements out of the pool once the store is back; while the store fails,
// the whole queue waits (the commit's backoff, src/lifecycle/store-patience.ts).
// Each key is tried for as long as its lease would have held it, at least
// 30 s. The timers do not hold the process open; a shutdown drops what is
// left (the leases then decide), and says how many.

export type GiveBack = 'release' | 'abandon';

interface Pending {
  readonly requestId: string;
  readonly claim: ClaimRequest;
  readonly how: GiveBack;
  /** performance.now() before which it is not tried (again). */
  due: number;
  /** Given up after this. */
  readonly until: number;
  /** Statements tried for it so far. */
  tries: number;
  /** `abandon`: the wait before the next look for a claim not found; 0 before the first. */
  recheckMs: number;
}

/** The first try: a moment after the failure, as the commit's first retry. */
const FIRST_TRY_MS = 100;
/** Between looks for a lost claim not found (yet): doubling from 1 s to this. */
const RECHECK_MAX_MS = 8000;

export class GiveBacks {
  private queue: Pending[] = [];
  private timer: NodeJS.Timeout | null = null;
  /** When the timer fires (performance.now()). */
  private timerAt = 0;
  private working = false;
  private closed = false;
  /** Store failures in a row: the whole queue waits storeBackoffMs(failures). */
  private failures = 0;
  /** performance.now() before which nothing is tried: the store failed last time. */
  private pausedUntil = 0;
  /** Keys taken off the queue by work() and not yet settled. */
  private inWork = 0;

  constructor(
    private readonly store: KeyStore,
    private readonly cache: ReplayCache | null,
    private readonly logger: Logger,
    private readonly metrics: Metrics,
  ) {}

  /** Keys waiting to be given back. */
  get size(): number {
    return this.queue.length + this.inWork;
  }

  add(requestId: string, claim: ClaimRequest, how: GiveBack): void {
    if (this.closed) return;
    const now = performance.now();
    const due = now + FIRST_TRY_MS;
    this.queue.push({ requestId, claim, how, due, until: now + storePatienceMs(claim.leaseMs), tries: 0, recheckMs: 0 });
    // A timer set for this key's first try or earlier covers it: no scan of the whole queue per key added.
    if (this.working || (this.timer !== null && this.timerAt <= due)) return;
    this.wake();
  }

  /** Stops; what is left stays claimed until its lease ends. */
  close(): void {
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.size > 0) this.logger.warn({ keys: this.size }, 'shutdown: keys not given back stay claimed until their leases end');
    this.queue = [];
  }

  private wake(): void {
    if (this.working || this.closed) return;
    let next = Infinity;
    for (const p of this.queue) if (p.due < next) next = p.due;
    if (next === Infinity) return;
    if (next < this.pausedUntil) next = this.pausedUntil;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timerAt = next;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.work();
    }, Math.max(0, next - performance.now()));
    this.timer.unref();
  }

  /** The keys due now, one statement at a time. */
  private async work(): Promise<void> {
    this.working = true;
    try {
      const now = performance.now();
      if (now < this.pausedUntil) return;
      const due = this.queue.filter((p) => p.due <= now);
      this.queue = this.queue.filter((p) => p.due > now);
      for (let i = 0; i < due.length; i++) {
        this.inWork = due.length - i;
        if (this.closed) return;
        const p = due[i]!;
        const r = await this.attempt(p);
        if (r === 'again') this.queue.push(p);
        else if (r === 'store_down') {
          // The whole queue waits, keys that came due meanwhile too: one try per wait, not one a key.
          this.pausedUntil = performance.now() + storeBackoffMs(this.failures++);
          for (const rest of due.slice(i)) {
            if (this.pausedUntil >= rest.until) this.giveUp(rest, 'the key store did not answer');
            else this.queue.push(rest);
          }
          return;
        }
      }
    } finally {
      this.inWork = 0;
      this.working = false;
      this.wake();
    }
  }

  private async attempt(p: Pending): Promise<'done' | 'again' | 'store_down'> {
    p.tries += 1;
    const { tenantId, key, ownerToken } = p.claim;
    // attempts: the failed claim or release first, then this queue's.
    try {
      if (p.how === 'release') {
        await this.store.release(tenantId, key, ownerToken);
        this.failures = 0;
        this.cache?.forget(tenantId, key);
        this.logger.info({ requestId: p.requestId, attempts: p.tries + 1 }, 'key released once the store answered');
        return 'done';
      }
      const result = await this.store.abandon(tenantId, key, ownerToken);
      this.failures = 0;
      if (result !== 'none') {
        this.logger.info({ requestId: p.requestId, attempts: p.tries + 1, result }, 'a claim whose reply was lost was given back once the store answered');
        return 'done';
      }
      // Not found: the claim never took effect, or has not yet. A statement the proxy stopped waiting for can
      // still be running on the server (waiting on a lock, or for its commit to reach the disk) and commit
      // later; its row is invisible until then. Looked for again, at growing intervals, while the lease matters.
      p.recheckMs = p.recheckMs === 0 ? 1000 : Math.min(p.recheckMs * 2, RECHECK_MAX_MS);
      p.due = performance.now() + p.recheckMs;
      return p.due < p.until ? 'again' : 'done';
    } catch (err) {
      this.metrics.storeErrors.inc({ op: 'release' });
      if (err instanceof StoreUnavailableError) return 'store_down';
      if (isRolledBack(err)) {
        // PostgreSQL rolled the statement back (a deadlock or a serialization conflict it broke): tried again shortly.
        p.due = performance.now() + FIRST_TRY_MS;
        if (p.due < p.until) return 'again';
      }
      this.giveUp(p, (err as Error).message);
      return 'done';
    }
  }

  private giveUp(p: Pending, why: string): void {
    this.logger.warn({ requestId: p.requestId, err: why }, `${p.how === 'release' ? 'release' : 'giving back a claim whose reply was lost'} given up; the key stays claimed until its lease ends`);
  }
}
