import type { IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import { upstreamProblem } from '../http/problems.js';
import { problemDialect } from '../http/dialects.js';
import { respondProblem } from '../http/respond.js';
import { relayUpstream, type RelaySink } from '../proxy/relay-handler.js';
import type { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';

// Forwards a request untouched and streams the answer back: unmatched
// requests, passthrough routes, methods outside the route's `methods`, and
// (with the body already buffered) unkeyed or shadowed requests and store
// outages on `onStoreError: passthrough` routes.

export type PassThroughSink = RelaySink<RequestContext>;

/** What a pass-through reports to `done` (once per request): outcome, status, detail and upstream time on the context. */
export function passThroughSink(done: (ctx: RequestContext) => void, sendTimeoutMs: number): PassThroughSink {
  return {
    head: (ctx, statusCode) => {
      ctx.status = statusCode;
    },
    end: (ctx, e, clientLeft, heldMs) => {
      ctx.upstreamMs = performance.now() - ctx.upstreamStart - heldMs;
      if (clientLeft) {
        // Not an upstream failure, and not counted as one.
        ctx.detail = clientLeft === 'response'
          ? 'the client closed the connection before the response was complete'
          : clientLeft === 'unread'
            ? `the client read nothing of the response for ${sendTimeoutMs} ms: the proxy cut it off`
            : 'the client closed the connection before its request was complete';
      } else if (e !== null) {
        ctx.outcome = 'upstream_error';
        ctx.detail = e.message;
        if (!ctx.res.headersSent) {
          const p = upstreamProblem(e);
          ctx.status = p.status;
          respondProblem(ctx.res, ctx.route?.dialect ?? problemDialect, p, e.message, ctx.requestId);
        }
      }
      done(ctx);
    },
  };
}

export function passThrough(deps: LifecycleDeps, ctx: RequestContext, body: Buffer | null, sink: PassThroughSink): void {
  const req = ctx.req;
  let source: Buffer | IncomingMessage | null = body;
  if (source === null && (req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined)) {
    source = req;
  }
  ctx.upstreamStart = performance.now();
  relayUpstream(deps.upstream, req, source, ctx.res, sink, ctx, deps.sendTimeoutMs);
}

/** passThrough for the async phases (unkeyed, shadow, store-error requests). */
export function passThroughAsync(deps: LifecycleDeps, ctx: RequestContext, body: Buffer): Promise<void> {
  return new Promise((resolve) => passThrough(deps, ctx, body, passThroughSink(() => resolve(), deps.sendTimeoutMs)));
}
