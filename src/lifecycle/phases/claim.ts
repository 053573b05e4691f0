import { randomUUID } from 'node:crypto';
import { StoreUnavailableError, claimMayHaveTaken } from '../../errors.js';
import { Problems } from '../../http/problems.js';
import type { ClaimOutcome, ClaimRequest } from '../../store/records.js';
import type { RequestContext } from '../context.js';
import type { LifecycleDeps } from '../deps.js';
import { endChild } from '../../tracing/spans.js';
import { INTERNAL } from '../../tracing/span.js';
import { KeyHold } from '../hold.js';
import { waiterId } from '../waiters.js';
import { NEXT, problem, type Phase, type ProblemVerdict, type Verdict } from '../verdict.js';

// Phase "claim": one statement (docs/storage.md) claims the key, or returns
// the row another request holds. A duplicate is then decided in this order:
// other fingerprint → mismatch; in flight, lease live → in flight (or, with
// `onInFlight: wait`, wait for it); outcome_unknown; complete → replay. What
// each of those answers is the route's strategy's (enforce or shadow).

export const claimPhase: Phase = {
  name: 'claim',
  run: async (deps, ctx) => {
    const plan = ctx.plan!;
    const policy = plan.policy;
    const req: ClaimRequest = {
      tenantId: ctx.tenantId,
      key: ctx.key!,
      fingerprint: ctx.fingerprint,
      ownerToken: randomUUID(),
      leaseMs: policy.leaseMs,
      ttlMs: policy.ttlMs,
      onExpiredLease: policy.onExpiredLease,
      route: plan.route.name,
      method: ctx.method,
      path: ctx.path,
    };
    ctx.claim = req;
    const t0 = performance.now();
    // Traced: the claim's span is made when the round trip has ended, from its two clock readings: a span made
    // before it would be kept through the wait for PostgreSQL, and copied by every scavenge meanwhile
    // (docs/tracing-cost.md).
    let outcome: ClaimOutcome;
    try {
      outcome = await deps.store.claim(req);
    } catch (err) {
      const failedAt = performance.now();
      if (ctx.span !== null) deps.tracing!.storeSpan(ctx, 'claim', t0, failedAt, null, err);
      ctx.storeMs += failedAt - t0;
      deps.metrics.storeErrors.inc({ op: 'claim' });
      // Sent and unanswered, or failed after part of it took keys, the claim may have taken the key for this
      // request, which runs nothing now: given back once the store answers (src/lifecycle/give-back.ts).
      if (claimMayHaveTaken(err)) deps.giveBacks.add(ctx.requestId, req, 'abandon');
      if (!(err instanceof StoreUnavailableError)) throw err;
      deps.storeHealth.down();
      return plan.strategy.storeDown(deps, ctx, err);
    }
    deps.storeHealth.up();
    const t1 = performance.now();
    const ms = t1 - t0;
    if (ctx.span !== null) deps.tracing!.storeSpan(ctx, 'claim', t0, t1, outcome.kind);
    ctx.storeMs += ms;
    deps.metrics.storeDuration.labels('claim').observe(ms / 1000);
    if (outcome.kind === 'in_flight' && policy.onInFlight === 'wait' && plan.strategy.waits) {
      outcome = await waitForFirst(deps, ctx, req, outcome);
    }
    return decide(deps, ctx, outcome);
  },
};

function decide(deps: LifecycleDeps, ctx: RequestContext, outcome: ClaimOutcome): Verdict {
  const plan = ctx.plan!;
  switch (outcome.kind) {
    case 'claimed':
      ctx.ownerToken = ctx.claim!.ownerToken;
      ctx.attempt = outcome.attempt;
      if (outcome.attempt > 1) deps.metrics.leaseTakeovers.inc({ route: plan.route.name });
      deps.cache?.rememberInFlight(ctx.tenantId, ctx.key!, ctx.fingerprint, Math.min(plan.policy.leaseMs, 5000), plan.policy.leaseMs);
      ctx.hold = new KeyHold(deps, ctx);
      return NEXT;
    case 'complete':
      return plan.strategy.answer(deps, ctx, { kind: 'replay', response: outcome.response, ttlLeftMs: outcome.ttlLeftMs }, 'replayed');
    case 'in_flight':
      return plan.strategy.answer(deps, ctx, inFlight(plan.durations.retryAfterS(outcome.retryAfterS)), 'conflict');
    case 'mismatch':
      return plan.strategy.answer(deps, ctx, problem(Problems.keyMismatch,
        'this idempotency key was already used with a different request (method, path, query, selected headers or body); use a new key for a new operation',
        'mismatch', { logDetail: null, status: plan.policy.mismatchStatus }), 'mismatch');
    case 'outcome_unknown':
      return plan.strategy.answer(deps, ctx, problem(Problems.outcomeUnknown,
        'the proxy holding this key stopped before the upstream answered, and this route does not run an operation twice; an operator must check the upstream and resolve the key (idempotency-proxy keys list / keys resolve, or keys purge)',
        'conflict', { logDetail: 'outcome unknown' }), 'conflict');
  }
}

/** 409 in-flight: the key is held by a request still running; `retryAfterS` is the route's estimate (src/lifecycle/estimate.ts). */
export function inFlight(retryAfterS: number): ProblemVerdict {
  return problem(Problems.inFlight, 'a request with this idempotency key is still being processed; retry after the time in Retry-After',
    'conflict', { logDetail: null, retryAfterS });
}

/**
 * onInFlight: wait — claim again when this instance settles the key; a key
 * held by another instance is checked at growing intervals (25 ms → 500 ms)
 * with a plain read (no row lock, no write), and claimed again once the read
 * shows it settled. No connection is held while waiting. After the route's
 * waitTimeout (at most the lease): the usual 409. A key the first request
 * released is claimed by the waiter, which then runs the operation itself. A
 * store error while waiting ends the wait with the 409.
 */
async function waitForFirst(deps: LifecycleDeps, ctx: RequestContext, req: ClaimRequest, first: ClaimOutcome): Promise<ClaimOutcome> {
  const deadline = performance.now() + ctx.plan!.policy.waitMs;
  const id = waiterId(req.tenantId, req.key);
  let outcome = first;
  let step = 25;
  let polls = 0;
  // Traced: the wait is a span, and each claim again a claim span (idempotency.reclaim) beside the first.
  const waitSpan = ctx.span === null ? null : deps.tracing!.child(ctx, 'wait', INTERNAL);
  while (outcome.kind === 'in_flight') {
    const left = deadline - performance.now();
    if (left <= 0) break;
    const woken = await deps.waiters.wait(id, Math.min(step, left));
    step = Math.min(step * 2, 500);
    polls += 1;
    try {
      if (!woken) {
        const rec = await deps.store.get(req.tenantId, req.key);
        if (rec !== null && !rec.expired && rec.state === 'in_flight' && !rec.leaseExpired) {
          outcome = { kind: 'in_flight', retryAfterS: rec.retryAfterS };
          continue;
        }
      }
      const span = ctx.span === null ? null : deps.tracing!.child(ctx, 'claim');
      try {
        outcome = await deps.store.claim(req);
      } catch (err) {
        if (span !== null) endChild(span, err);
        // A claim again that may have taken the key, its reply lost: given back, as the first claim's would be.
        if (claimMayHaveTaken(err)) deps.giveBacks.add(ctx.requestId, req, 'abandon');
        throw err;
      }
      if (span !== null) {
        span.setAttribute('idempotency.claim', outcome.kind);
        span.setAttribute('idempotency.reclaim', true);
        endChild(span);
      }
    } catch {
      break; // keep the last answer: 409
    }
  }
  if (waitSpan !== null) {
    waitSpan.setAttribute('idempotency.claim', outcome.kind);
    waitSpan.setAttribute('idempotency.wait.polls', polls);
    endChild(waitSpan);
  }
  return outcome;
}
