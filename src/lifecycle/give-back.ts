import { setTimeout as sleep } from 'node:timers/promises';
import { StoreUnavailableError } from '../errors.js';
import type { ClaimRequest } from '../store/records.js';
import type { LifecycleDeps } from './deps.js';
import { storeBackoffMs, storePatienceMs } from './store-patience.js';

// Keys given back after the request was answered, while the key store is down.
// The request is never held for it: its answer does not depend on it. Left
// claimed, a key would stay in flight until its lease ends (90 s by default:
// every retry meanwhile gets 409), with nobody to give it back, and on an
// `onExpiredLease: fail` route the next retry would then find it
// outcome_unknown, for an operator to resolve, though nothing ran.
//
// - `release`: the key is known to bind no answer (nothing was sent, or the
//   upstream answered a status the route releases on): KeyStore.release.
// - `abandon`: a claim whose reply was lost may have claimed the key for a
//   request answered 503 without running anything: KeyStore.abandon gives it
//   back as the claim found it. Not found, it is looked for again now and then
//   for as long as the lease would matter: the claim may commit late.
//
// Retried with the commit's backoff and patience (src/lifecycle/store-patience.ts).
// Both are fenced by the owner token and the in_flight state: once another
// claim took the key over (or made it outcome_unknown) they change nothing.
// The timers do not hold the process open: a shutdown ends the retries, and
// the lease then decides.

export type GiveBack = 'release' | 'abandon';

export function giveBackLater(deps: LifecycleDeps, requestId: string, claim: ClaimRequest, how: GiveBack): void {
  void retry(deps, requestId, claim, how);
}

/** Between checks for a lost claim not found (yet): doubling from 1 s to this. */
const RECHECK_MAX_MS = 8000;

async function retry(deps: LifecycleDeps, requestId: string, claim: ClaimRequest, how: GiveBack): Promise<void> {
  const giveUpAt = performance.now() + storePatienceMs(claim.leaseMs);
  let recheckMs = 0;
  for (let i = 0; ; i++) {
    await sleep(recheckMs > 0 ? recheckMs : storeBackoffMs(i), undefined, { ref: false });
    try {
      if (how === 'release') {
        await deps.store.release(claim.tenantId, claim.key, claim.ownerToken);
        deps.cache?.forget(claim.tenantId, claim.key);
        deps.logger.info({ requestId, attempts: i + 2 }, 'key released once the store answered');
        return;
      }
      const result = await deps.store.abandon(claim.tenantId, claim.key, claim.ownerToken);
      if (result !== 'none') {
        deps.logger.info({ requestId, attempts: i + 2, result }, 'a claim whose reply was lost was given back once the store answered');
        return;
      }
      // Not found: the claim never took effect, or has not yet. A statement the proxy stopped waiting for can
      // still be running on the server (waiting on a lock, or for its commit to reach the disk) and commit
      // later, up to statement_timeout after it was sent; its row is invisible until then. Checked again, at
      // growing intervals, for as long as the key's lease would matter.
      if (performance.now() >= giveUpAt) return;
      recheckMs = recheckMs === 0 ? 1000 : Math.min(recheckMs * 2, RECHECK_MAX_MS);
    } catch (err) {
      deps.metrics.storeErrors.inc({ op: 'release' });
      if (!(err instanceof StoreUnavailableError) || performance.now() >= giveUpAt) {
        deps.logger.warn({ requestId, err: (err as Error).message }, `${how === 'release' ? 'release' : 'giving back a claim whose reply was lost'} given up; the key stays claimed until its lease ends`);
        return;
      }
    }
  }
}
