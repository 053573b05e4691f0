import { problemDialect, type Dialect } from '../http/dialects.js';
import { cutResponse, respondProblem, respondRecord, respondReplay } from '../http/respond.js';
import type { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';
import { referenceOf } from '../proxy/reference.js';
import { cutIfUnread } from '../proxy/slow-client.js';
import { passThroughAsync } from './passthrough.js';
import { replayReference } from './reference.js';
import type { ReplayVerdict, Verdict } from './verdict.js';

// Phase "respond": carries out the verdict that answered the request, and
// says on the context what the request's log line and metrics report. The
// bytes are written by src/http/respond.ts (the proxy's own answers) or
// relayed by src/proxy/ (the upstream's).

/** A replay body larger than this may sit unsent in Node for a client that reads nothing: it is watched (cutIfUnread). */
const WATCHED_REPLAY_BYTES = 64 * 1024;

export function respond(deps: LifecycleDeps, ctx: RequestContext, v: Verdict): Promise<void> | void {
  const res = ctx.res;
  // The route's dialect (docs/profiles.md); a request refused before its route was found speaks problem+json.
  const route = ctx.route;
  const dialect = route?.dialect ?? problemDialect;
  const echo = route !== null && route.policy.echoKey;
  switch (v.kind) {
    case 'problem':
      ctx.outcome = v.outcome;
      ctx.status = v.status ?? v.problem.status;
      ctx.detail = v.logDetail;
      respondProblem(res, dialect, v.problem, v.detail, ctx.requestId, {
        status: v.status, retryAfterS: v.retryAfterS, close: v.close, retryable: v.retryable, key: ctx.key, echo: echo ? ctx.key : null, extra: v.extra,
      });
      return;
    case 'replay': {
      ctx.outcome = 'replayed';
      ctx.status = v.response.status;
      if (ctx.span !== null) deps.tracing!.linkReplay(ctx, v.response);
      // A record without its body is a marker or a reference; a reference replays the resource's current body.
      const path = v.response.bodyRetained ? null : referenceOf(v.response.headers);
      if (path === null) {
        respondReplay(res, dialect, v.response, ctx.requestId, ctx.key, echo);
        if (v.response.body.length > WATCHED_REPLAY_BYTES) cutIfUnread(res, deps.sendTimeoutMs);
      }
      // Served from PostgreSQL (the cache missed): put the record back.
      if (v.ttlLeftMs !== undefined) deps.cache?.refill(ctx.tenantId, ctx.key!, ctx.fingerprint, v.response, v.ttlLeftMs);
      return path === null ? undefined : replayReferenceOf(deps, ctx, v, path, dialect, echo);
    }
    case 'record':
      ctx.status = v.response.status;
      if (!res.destroyed) respondRecord(res, dialect, v.response, ctx.requestId, echo ? ctx.key : null);
      return;
    case 'end':
      if (res.destroyed) return;
      if (v.last !== null) res.end(v.last);
      else res.end();
      return;
    case 'forward':
      return forward(deps, ctx, v.outcome);
    case 'cut':
      ctx.outcome = v.outcome;
      ctx.detail = v.detail;
      cutResponse(res);
      return;
    case 'done':
    case 'next':
      return;
  }
}

async function forward(deps: LifecycleDeps, ctx: RequestContext, outcome: 'passthrough' | 'store_error'): Promise<void> {
  ctx.outcome = outcome;
  await passThroughAsync(deps, ctx, ctx.body);
  // A store outage stays the request's outcome, whatever the upstream answered.
  if (outcome === 'store_error') ctx.outcome = outcome;
}

async function replayReferenceOf(deps: LifecycleDeps, ctx: RequestContext, v: ReplayVerdict, path: string, dialect: Dialect, echo: boolean): Promise<void> {
  const p = await replayReference(deps, ctx, v.response, path, dialect, echo);
  if (p !== null) respond(deps, ctx, p);
}
