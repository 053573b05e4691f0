import type { Handler } from '../http/server.js';
import { problemFor, Problems } from '../http/problems.js';
import { cutResponse } from '../http/respond.js';
import { sourceOf } from '../errors.js';
import { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';
import { createFinish } from './finish.js';
import { passThrough, passThroughSink } from './passthrough.js';
import { framingPhase } from './phases/framing.js';
import { routePhase } from './phases/route.js';
import { runPipeline } from './pipeline.js';
import { respond } from './respond.js';
import { NEXT, problem } from './verdict.js';

// The request lifecycle (docs/lifecycle.md): framing → route, synchronously,
// then the route's phases (src/lifecycle/plan.ts):
//   body → identify → lookaside → claim → probe → forward → commit | release → respond
// A fault no phase expected answers 500 internal-error (or cuts a response
// already under way); its log line names the phase and the source.

const noop = (): void => {};

export function createHandler(deps: LifecycleDeps): Handler {
  const tracing = deps.tracing;
  const finished = createFinish(deps.metrics, deps.logger);
  // With tracing off the finish is the plain one: the only cost is the branch at the start.
  const finish = tracing === null ? finished : (ctx: RequestContext): void => {
    finished(ctx);
    if (ctx.span !== null) tracing.end(ctx);
  };
  const passSink = passThroughSink(finish, deps.sendTimeoutMs);

  const failed = (ctx: RequestContext, err: unknown): void => {
    answerFault(deps, ctx, err);
    finish(ctx);
  };

  return (req, res) => {
    res.on('error', noop);
    const ctx = new RequestContext(req, res);
    if (tracing !== null) tracing.start(ctx);
    try {
      let v = framingPhase.run(deps, ctx);
      if (v === NEXT) {
        ctx.phase = 'route';
        v = routePhase.run(deps, ctx);
      }
      if (v === NEXT) {
        runPipeline(deps, ctx, ctx.plan!.phases).then(() => finish(ctx), (err: unknown) => failed(ctx, err));
        return;
      }
      if (v.kind !== 'forward') {
        respond(deps, ctx, v);
        finish(ctx);
        return;
      }
      passThrough(deps, ctx, null, passSink);
    } catch (err) {
      failed(ctx, err);
    }
  };
}

/**
 * A fault no phase expected (a bug, or an error no phase maps): 500
 * internal-error (503 for an unreachable store), or the response cut if it
 * was already under way. A key already claimed stays in flight until its
 * lease ends (the pipeline stopped its heartbeat).
 */
function answerFault(deps: LifecycleDeps, ctx: RequestContext, err: unknown): void {
  const p = problemFor(err);
  ctx.outcome = p === Problems.storeUnavailable ? 'store_error' : 'internal_error';
  ctx.source = sourceOf(err);
  ctx.detail = (err as Error)?.message ?? String(err);
  deps.logger.error({ requestId: ctx.requestId, phase: ctx.phase, source: ctx.source, err }, 'unexpected error');
  if (ctx.res.headersSent) {
    cutResponse(ctx.res);
    return;
  }
  const detail = p === Problems.storeUnavailable
    ? 'the idempotency key store cannot be reached; retry with the same key'
    : 'the proxy failed unexpectedly; the request may be retried with the same key';
  respond(deps, ctx, problem(p, detail, ctx.outcome, { logDetail: ctx.detail, ...(p.status === 503 ? { retryAfterS: deps.storeHealth.retryAfterS() } : {}) }));
}
