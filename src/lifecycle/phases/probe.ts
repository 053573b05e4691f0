import { StoreUnavailableError } from '../../errors.js';
import { Problems } from '../../http/problems.js';
import { sendProbe, type ProbeResult } from '../../proxy/probe.js';
import type { StoredResponse } from '../../store/records.js';
import { endChild } from '../../tracing/spans.js';
import type { RequestContext } from '../context.js';
import type { LifecycleDeps } from '../deps.js';
import { NEXT, problem, type Phase, type Verdict } from '../verdict.js';
import { inFlight } from './claim.js';

// Phase "probe", on onExpiredLease: probe routes only (compiled into their
// plan, src/lifecycle/plan.ts): a claim that took over an expired lease
// (attempt > 1: the holder crashed or stalled, and nobody knows whether the
// upstream ran the operation) asks the upstream first, under the lease this
// request now holds (its heartbeat runs). A first claim goes straight on.
//   2xx  → the operation ran: the probe's answer is committed as the key's
//          record (fenced by the owner token) and replayed to this client;
//   404  → it did not run: on to forward, the one execution;
//   else → nobody knows: the key is stored outcome_unknown and this and
//          every later retry get 409 outcome-unknown, as with `fail`.

export const probePhase: Phase = {
  name: 'probe',
  run: async (deps, ctx) => {
    if (ctx.attempt <= 1) return NEXT;
    const plan = ctx.plan!;
    const span = ctx.span === null ? null : deps.tracing!.child(ctx, 'probe');
    const t0 = performance.now();
    const result = await sendProbe(deps.upstream, plan.route.probe!, ctx.req, ctx.key!, {
      requestId: ctx.requestId,
      limit: plan.policy.maxStoredResponseBytes,
      timeoutMs: deps.upstream.timeoutMs,
      storeHeader: plan.route.storeHeader,
      budget: deps.budget,
    });
    ctx.upstreamMs = performance.now() - t0;
    ctx.probe = result.kind;
    deps.metrics.probes.inc({ route: plan.route.name, result: result.kind });
    if (span !== null) {
      span.setAttribute('idempotency.probe', result.kind);
      endChild(span);
    }
    return decide(deps, ctx, result);
  },
};

function decide(deps: LifecycleDeps, ctx: RequestContext, result: ProbeResult): Verdict | Promise<Verdict> {
  switch (result.kind) {
    case 'absent':
      return NEXT;
    case 'found':
      // Given back by the pipeline when the request ends, with the body's bytes.
      ctx.buffered += result.buffered;
      return found(deps, ctx, result.response);
    case 'failed':
      return unknown(deps, ctx, result.reason);
  }
}

/** The probe's answer becomes the key's record; this client gets it as a replay. */
async function found(deps: LifecycleDeps, ctx: RequestContext, response: StoredResponse): Promise<Verdict> {
  const claim = ctx.claim!;
  const t0 = performance.now();
  // Traced: (sampled) the record keeps this request's trace context, so its replays link to where it was
  // recorded; the commit's span is made when the round trip has ended, as the commit phase's is.
  const stored = ctx.span === null ? response : deps.tracing!.withTrace(ctx, response);
  let outcome;
  try {
    outcome = await deps.store.commit({ tenantId: claim.tenantId, key: claim.key, ownerToken: claim.ownerToken, response: stored });
  } catch (err) {
    const failedAt = performance.now();
    if (ctx.span !== null) deps.tracing!.storeSpan(ctx, 'commit', t0, failedAt, null, err);
    ctx.storeMs += failedAt - t0;
    deps.metrics.storeErrors.inc({ op: 'commit' });
    if (!(err instanceof StoreUnavailableError)) throw err;
    // Nothing stored: the key stays claimed until its lease ends, and the retry after it asks again.
    return problem(Problems.storeUnavailable, 'the idempotency key store cannot be reached; retry with the same key', 'store_error',
      { logDetail: `the outcome probe found the operation, its answer could not be recorded: ${err.message}`, retryAfterS: deps.storeHealth.retryAfterS() });
  }
  const t1 = performance.now();
  if (ctx.span !== null) deps.tracing!.storeSpan(ctx, 'commit', t0, t1, null);
  ctx.storeMs += t1 - t0;
  if (!outcome.committed) {
    // The lease was taken over while the probe ran: the key is someone else's now.
    deps.metrics.leaseLost.inc({ route: claim.route });
    return inFlight(ctx.plan!.durations.retryAfterS(1));
  }
  deps.cache?.rememberComplete(claim.tenantId, claim.key, ctx.fingerprint, stored, outcome.ttlLeftMs);
  return { kind: 'replay', response }; // without the trace context: this replay is the recording, not a replay of it
}

/** Stores the key outcome_unknown and answers 409 outcome-unknown, now and to every later retry. */
async function unknown(deps: LifecycleDeps, ctx: RequestContext, reason: string): Promise<Verdict> {
  const claim = ctx.claim!;
  const t0 = performance.now();
  let logDetail = reason;
  try {
    if (!(await deps.store.markUnknown(claim.tenantId, claim.key, claim.ownerToken))) logDetail = `${reason}; the lease was taken over meanwhile`;
    deps.cache?.forget(claim.tenantId, claim.key);
  } catch (err) {
    // The key stays in flight until its lease ends; the retry after it asks again.
    deps.metrics.storeErrors.inc({ op: 'mark_unknown' });
    logDetail = `${reason}; marking the key outcome_unknown failed: ${(err as Error).message}`;
  } finally {
    ctx.storeMs += performance.now() - t0;
  }
  return ctx.plan!.strategy.answer(deps, ctx, problem(Problems.outcomeUnknown,
    'the proxy holding this key stopped before the upstream answered, and the upstream could not say whether the operation ran; an operator must check the upstream and resolve the key (idempotency-proxy keys list / keys resolve, or keys purge)',
    'conflict', { logDetail }), 'conflict');
}
