import { Problems } from '../http/problems.js';
import type { StoreUnavailableError } from '../errors.js';
import type { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';
import { PASS_THROUGH, problem, type ShadowDecision, type Verdict } from './verdict.js';

// Enforce and shadow as two strategies instead of branches: what a refusal
// (a key problem) or a duplicate's answer (replay, 409, 422) becomes, and what
// a store outage at the claim becomes.

export interface Strategy {
  readonly name: 'enforce' | 'shadow';
  /** onInFlight: wait may hold the request. */
  readonly waits: boolean;
  /** The answer enforcement gives (`decision` names it for shadow's count). */
  answer(deps: LifecycleDeps, ctx: RequestContext, verdict: Verdict, decision: ShadowDecision): Verdict;
  /** The claim could not reach the key store. */
  storeDown(deps: LifecycleDeps, ctx: RequestContext, err: StoreUnavailableError): Verdict;
}

const STORE_DOWN: Verdict = { kind: 'forward', outcome: 'store_error' };

export const enforce: Strategy = {
  name: 'enforce',
  waits: true,
  answer: (_deps, _ctx, verdict) => verdict,
  storeDown: (deps, ctx, err) => {
    // onStoreError: passthrough — availability over safety, as this route chose.
    if (ctx.plan!.policy.onStoreError === 'passthrough') {
      ctx.detail = err.message;
      return STORE_DOWN;
    }
    return problem(Problems.storeUnavailable, 'the idempotency key store cannot be reached; retry with the same key', 'store_error',
      { logDetail: err.message, retryAfterS: deps.storeHealth.retryAfterS() });
  },
};

export const shadow: Strategy = {
  name: 'shadow',
  waits: false,
  answer: (deps, ctx, _verdict, decision) => {
    ctx.shadow = decision;
    deps.metrics.shadowDecisions.inc({ route: ctx.route!.name, decision });
    return PASS_THROUGH;
  },
  // A shadow route never refuses for want of the store: it forwards, as it would without the proxy.
  storeDown: (_deps, ctx, err) => {
    ctx.detail = err.message;
    return STORE_DOWN;
  },
};
