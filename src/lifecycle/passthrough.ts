import type { IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import { relayUpstream, type RelaySink } from '../proxy/relay.js';
import type { UpstreamError } from '../proxy/upstream.js';
import { Problems, sendProblem } from '../http/problems.js';
import type { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';

// Forwards a request untouched and streams the answer back: unmatched
// requests, passthrough routes, methods outside the route's `methods`, and
// (with the body already buffered) unkeyed or shadowed requests.

export type PassThroughSink = RelaySink<RequestContext>;

/** What a pass-through reports to `done` (once per request): outcome, status, detail and upstream time on the context. */
export function passThroughSink(done: (ctx: RequestContext) => void): PassThroughSink {
  return {
    head: (ctx, statusCode) => {
      ctx.status = statusCode;
    },
    end: (ctx, e, clientLeft) => {
      ctx.upstreamMs = performance.now() - ctx.upstreamStart;
      if (clientLeft) {
        // Not an upstream failure, and not counted as one.
        ctx.detail = 'the client closed the connection before the response was complete';
      } else if (e !== null) {
        if (!ctx.res.headersSent) upstreamFailure(ctx, e);
        else {
          ctx.outcome = 'upstream_error';
          ctx.detail = e.message;
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
  relayUpstream(deps.upstream, req, ctx.method, source, ctx.res, sink, ctx);
}

/** passThrough for the async phases (unkeyed, shadow, store-error requests). */
export function passThroughAsync(deps: LifecycleDeps, ctx: RequestContext, body: Buffer | null): Promise<void> {
  return new Promise((resolve) => passThrough(deps, ctx, body, passThroughSink(() => resolve())));
}

export function upstreamFailure(ctx: RequestContext, e: UpstreamError): void {
  ctx.outcome = 'upstream_error';
  ctx.detail = e.message;
  const p = e.kind === 'not_sent' ? Problems.upstreamUnreachable : e.kind === 'timeout' ? Problems.upstreamTimeout : Problems.upstreamReset;
  ctx.status = p.status;
  sendProblem(ctx.res, p, e.message, ctx.requestId);
}
