import { NEXT, type Phase } from '../verdict.js';
import { inFlight } from './claim.js';

// Phase "lookaside" (only on enforce routes, and only with Redis configured):
// a hit with the same fingerprint answers a replay, or a 409 on an
// `onInFlight: conflict` route, without PostgreSQL. A miss, a hit with
// another fingerprint, an in-flight hit on an `onInFlight: wait` route, an
// error, a slow or open-circuit Redis: on to the claim. The cache never says
// a key is new (docs/cache.md).

export const lookasidePhase: Phase = {
  name: 'lookaside',
  run: async (deps, ctx) => {
    const hit = await deps.cache!.lookup(ctx.tenantId, ctx.key!);
    if (hit === null || !hit.fingerprint.equals(ctx.fingerprint)) {
      ctx.cache = 'miss';
      return NEXT;
    }
    ctx.cache = 'hit';
    if (hit.kind === 'complete') return { kind: 'replay', response: hit.response };
    // The marker's lease bounds the estimate, as the claim's row does.
    const plan = ctx.plan!;
    if (plan.policy.onInFlight === 'conflict') return inFlight(plan.durations.retryAfterS(hit.retryAfterS));
    return NEXT;
  },
};
