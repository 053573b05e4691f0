import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { checkFraming } from '../http/framing.js';
import { Problems, sendProblem } from '../http/problems.js';
import { sendReplay } from '../http/replay.js';
import { createRequestLog } from '../log/request-log.js';
import type { CompiledRoute } from '../policy/router.js';
import { StoreUnavailableError } from '../store/db/port.js';
import type { ClaimOutcome, ClaimRequest } from '../store/records.js';
import { readBody } from './body.js';
import { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';
import { execute } from './execute.js';
import { identify } from './identify.js';
import { passThrough, passThroughAsync, passThroughSink } from './passthrough.js';
import { waiterId } from './waiters.js';

// The request lifecycle (docs/lifecycle.md):
//   route → body → identify (key, tenant, fingerprint) → lookaside → claim
//   → forward → commit | release → respond
// Expected outcomes are values; only faults throw.

export type Handler = (req: IncomingMessage, res: ServerResponse) => void;

const noop = (): void => {};

export function createHandler(deps: LifecycleDeps): Handler {
  const { logger, metrics } = deps;
  const requestLog = createRequestLog(logger);

  // Metric children bound once per (route, outcome): no label lookup per request.
  type Bound = { count: { inc(): void }; duration: { observe(v: number): void }; upstream: { observe(v: number): void } };
  const bound = new Map<CompiledRoute | null, Map<string, Bound>>();
  let lastRoute: CompiledRoute | null | undefined;
  let lastOutcome = '';
  let lastBound: Bound | null = null;
  const children = (route: CompiledRoute | null, outcome: string): Bound => {
    // Under load most requests share their route and outcome with the one before.
    if (route === lastRoute && outcome === lastOutcome && lastBound !== null) return lastBound;
    let byOutcome = bound.get(route);
    if (byOutcome === undefined) bound.set(route, (byOutcome = new Map()));
    let b = byOutcome.get(outcome);
    if (b === undefined) {
      const name = route?.name ?? '(none)';
      b = {
        count: metrics.requests.labels(name, outcome),
        duration: metrics.requestDuration.labels(name, outcome),
        upstream: metrics.upstreamDuration.labels(name),
      };
      byOutcome.set(outcome, b);
    }
    lastRoute = route;
    lastOutcome = outcome;
    lastBound = b;
    return b;
  };

  const finish = (ctx: RequestContext): void => {
    const ms = ctx.elapsedMs();
    const m = children(ctx.route, ctx.outcome);
    m.count.inc();
    m.duration.observe(ms / 1000);
    if (ctx.upstreamMs >= 0) m.upstream.observe(ctx.upstreamMs / 1000);
    requestLog(ctx, ctx.route?.name ?? '(none)', ms);
  };
  const passSink = passThroughSink(finish);

  const failed = (ctx: RequestContext, err: unknown): void => {
    const res = ctx.res;
    ctx.outcome = 'store_error';
    ctx.detail = (err as Error)?.message ?? String(err);
    logger.error({ requestId: ctx.requestId, err }, 'unexpected error');
    if (!res.headersSent) {
      ctx.status = 500;
      sendProblem(res, Problems.internal, 'the proxy failed unexpectedly; the request may be retried with the same key', ctx.requestId);
    } else res.destroy();
    finish(ctx);
  };

  return (req, res) => {
    res.on('error', noop);
    const ctx = new RequestContext(req, res);
    try {
      // Phase: framing. What the upstream could read differently never goes further.
      const framing = checkFraming(req);
      if (framing !== null) {
        reject(ctx, framing.status, framing.problem, framing.detail, true);
        finish(ctx);
        return;
      }
      // Phase: route. Requests no idempotent route takes are forwarded as
      // they come, with no promise in between: the pass-through path is as
      // short as a bare proxy's.
      const route = deps.router.match(ctx.method, ctx.path);
      ctx.route = route;
      if (route === null || !route.idempotent || !route.idemMethods.has(ctx.method)) {
        ctx.outcome = 'passthrough';
        passThrough(deps, ctx, null, passSink);
        return;
      }
      handle(deps, ctx, route).then(() => finish(ctx), (err: unknown) => failed(ctx, err));
    } catch (err) {
      failed(ctx, err);
    }
  };
}

async function handle(deps: LifecycleDeps, ctx: RequestContext, route: CompiledRoute): Promise<void> {
  const policy = route.policy;
  const shadow = policy.mode === 'shadow';

  // Phase: body.
  const b = await readBody(ctx.req, policy.maxBodyBytes);
  if (b.kind === 'aborted') {
    ctx.outcome = 'rejected';
    ctx.status = 400;
    ctx.detail = 'client aborted the request body';
    sendProblem(ctx.res, Problems.bodyIncomplete, 'the request body ended before its declared length', ctx.requestId);
    return;
  }
  if (b.kind === 'too_large') {
    // Even in shadow mode: the body could not be buffered.
    return reject(ctx, 413, Problems.bodyTooLarge, `the request body is larger than this route's limit of ${b.limit} bytes`, true);
  }
  const body = b.body;

  // Phase: identify.
  const id = identify(ctx, route, body);
  if (id.kind !== 'keyed') {
    if (id.kind === 'invalid') {
      if (shadow) return shadowForward(deps, ctx, route, body, 'rejected');
      const p = id.problem.problem === 'key-malformed' ? Problems.keyMalformed
        : id.problem.problem === 'key-body-not-json' ? Problems.keyBodyNotJson : Problems.keyPointerMissing;
      return reject(ctx, 400, p, id.problem.detail, false);
    }
    if (policy.required) {
      if (shadow) return shadowForward(deps, ctx, route, body, 'rejected');
      return reject(ctx, 400, Problems.keyMissing, keyMissingDetail(route), false);
    }
    ctx.outcome = 'passthrough';
    await passThroughAsync(deps, ctx, body);
    return;
  }
  ctx.key = id.key;
  ctx.tenantId = id.tenantId;

  // Phase: lookaside (Redis). A hit answers only with a matching fingerprint.
  const cache = deps.cache;
  if (cache !== null && !shadow) {
    const hit = await cache.lookup(id.tenantId, id.key);
    if (hit !== null && hit.fingerprint.equals(id.fingerprint)) {
      ctx.cache = 'hit';
      if (hit.kind === 'complete') return answer(deps, ctx, route, body, id, { kind: 'complete', response: hit.response }, null);
      if (policy.onInFlight === 'conflict') return answer(deps, ctx, route, body, id, { kind: 'in_flight', retryAfterS: hit.retryAfterS }, null);
    } else ctx.cache = 'miss';
  }

  // Phase: claim.
  const claimReq: ClaimRequest = {
    tenantId: id.tenantId,
    key: id.key,
    fingerprint: id.fingerprint,
    ownerToken: randomUUID(),
    leaseMs: policy.leaseMs,
    ttlMs: policy.ttlMs,
    onExpiredLease: policy.onExpiredLease,
    route: route.name,
    method: ctx.method,
    path: ctx.path,
  };
  const outcome = await claim(deps, ctx, route, body, claimReq);
  if (outcome === null) return;
  return answer(deps, ctx, route, body, id, outcome, claimReq);
}

/** Runs the claim; null when a store outage was already answered. */
async function claim(deps: LifecycleDeps, ctx: RequestContext, route: CompiledRoute, body: Buffer, req: ClaimRequest): Promise<ClaimOutcome | null> {
  const t0 = performance.now();
  try {
    const outcome = await deps.store.claim(req);
    const ms = performance.now() - t0;
    ctx.storeMs += ms;
    deps.metrics.storeDuration.labels('claim').observe(ms / 1000);
    return outcome;
  } catch (err) {
    ctx.storeMs += performance.now() - t0;
    deps.metrics.storeErrors.inc({ op: 'claim' });
    if (!(err instanceof StoreUnavailableError)) throw err;
    ctx.outcome = 'store_error';
    ctx.detail = err.message;
    if (route.policy.onStoreError === 'passthrough' || route.policy.mode === 'shadow') {
      // Availability over safety, as this route chose: forwarded undeduplicated.
      await passThroughAsync(deps, ctx, body);
      ctx.outcome = 'store_error';
      return null;
    }
    ctx.status = 503;
    sendProblem(ctx.res, Problems.storeUnavailable, 'the idempotency key store cannot be reached; retry with the same key', ctx.requestId, { retryAfterS: 1 });
    return null;
  }
}

type Keyed = { readonly key: string; readonly tenantId: string; readonly fingerprint: Buffer };

async function answer(
  deps: LifecycleDeps,
  ctx: RequestContext,
  route: CompiledRoute,
  body: Buffer,
  id: Keyed,
  outcome: ClaimOutcome,
  claimReq: ClaimRequest | null,
): Promise<void> {
  const policy = route.policy;
  const shadow = policy.mode === 'shadow';
  if (outcome.kind === 'in_flight' && policy.onInFlight === 'wait' && !shadow && claimReq !== null) {
    outcome = await waitForFirst(deps, ctx, claimReq, outcome);
  }
  switch (outcome.kind) {
    case 'claimed':
      ctx.ownerToken = claimReq!.ownerToken;
      ctx.attempt = outcome.attempt;
      if (outcome.attempt > 1) deps.metrics.leaseTakeovers.inc({ route: route.name });
      deps.cache?.rememberInFlight(id.tenantId, id.key, id.fingerprint, Math.min(policy.leaseMs, 5000), policy.leaseMs);
      await execute(deps, ctx, route, body, { tenantId: id.tenantId, key: id.key, ownerToken: claimReq!.ownerToken, fingerprint: id.fingerprint });
      return;
    case 'complete':
      if (shadow) return shadowForward(deps, ctx, route, body, 'replayed');
      ctx.outcome = 'replayed';
      ctx.status = outcome.response.status;
      sendReplay(ctx.res, outcome.response, ctx.requestId);
      // Served from PostgreSQL (the cache missed): put the record back.
      if (claimReq !== null && outcome.ttlLeftMs !== undefined) {
        deps.cache?.refill(id.tenantId, id.key, id.fingerprint, outcome.response, outcome.ttlLeftMs);
      }
      return;
    case 'in_flight':
      if (shadow) return shadowForward(deps, ctx, route, body, 'conflict');
      ctx.outcome = 'conflict';
      ctx.status = 409;
      sendProblem(ctx.res, Problems.inFlight,
        'a request with this idempotency key is still being processed; retry after the time in Retry-After',
        ctx.requestId, { retryAfterS: outcome.retryAfterS });
      return;
    case 'mismatch':
      if (shadow) return shadowForward(deps, ctx, route, body, 'mismatch');
      ctx.outcome = 'mismatch';
      ctx.status = policy.mismatchStatus;
      sendProblem(ctx.res, Problems.keyMismatch,
        'this idempotency key was already used with a different request (method, path, query, selected headers or body); use a new key for a new operation',
        ctx.requestId, { status: policy.mismatchStatus });
      return;
    case 'outcome_unknown':
      if (shadow) return shadowForward(deps, ctx, route, body, 'conflict');
      ctx.outcome = 'conflict';
      ctx.status = 409;
      ctx.detail = 'outcome unknown';
      sendProblem(ctx.res, Problems.outcomeUnknown,
        'the proxy holding this key stopped before the upstream answered, and this route does not run an operation twice; an operator must check the upstream and resolve the key (idempotency-proxy keys show / keys purge)',
        ctx.requestId);
      return;
  }
}

/**
 * onInFlight: wait — claim again when this instance settles the key; a key
 * held by another instance is checked at growing intervals (25 ms → 500 ms)
 * with a plain read (no row lock, no write), and claimed again once the read
 * shows it settled. No connection is held while waiting. After the route's
 * waitTimeout: the usual 409.
 */
async function waitForFirst(deps: LifecycleDeps, ctx: RequestContext, req: ClaimRequest, first: ClaimOutcome): Promise<ClaimOutcome> {
  const deadline = performance.now() + ctx.route!.policy.waitMs;
  const id = waiterId(req.tenantId, req.key);
  let outcome = first;
  let step = 25;
  while (outcome.kind === 'in_flight') {
    const left = deadline - performance.now();
    if (left <= 0) break;
    const woken = await deps.waiters.wait(id, Math.min(step, left));
    step = Math.min(step * 2, 500);
    try {
      if (!woken) {
        const rec = await deps.store.get(req.tenantId, req.key);
        if (rec !== null && !rec.expired && rec.state === 'in_flight' && !rec.leaseExpired) {
          outcome = { kind: 'in_flight', retryAfterS: rec.retryAfterS };
          continue;
        }
      }
      outcome = await deps.store.claim(req);
    } catch {
      break; // keep the last answer: 409
    }
  }
  return outcome;
}

async function shadowForward(deps: LifecycleDeps, ctx: RequestContext, route: CompiledRoute, body: Buffer, decision: string): Promise<void> {
  ctx.shadow = decision;
  deps.metrics.shadowDecisions.inc({ route: route.name, decision });
  ctx.outcome = 'passthrough';
  await passThroughAsync(deps, ctx, body);
}

function reject(ctx: RequestContext, status: number, p: Parameters<typeof sendProblem>[1], detail: string, close: boolean): void {
  ctx.outcome = 'rejected';
  ctx.status = status;
  ctx.detail = detail;
  if (close) ctx.res.setHeader('connection', 'close');
  sendProblem(ctx.res, p, detail, ctx.requestId, { status });
}

function keyMissingDetail(route: CompiledRoute): string {
  const k = route.policy.key;
  if (k.kind === 'fromBody') return `this route requires an idempotency key in the JSON body at ${k.pointer}`;
  return `this route requires an idempotency key in the ${k.header} header`;
}
