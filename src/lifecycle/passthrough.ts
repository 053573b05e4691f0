import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Writable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { clientResponseHeaders } from '../proxy/headers.js';
import { streamUpstream } from '../proxy/forward.js';
import type { UpstreamError } from '../proxy/upstream.js';
import { Problems, sendProblem } from '../http/problems.js';
import type { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';

// Forwards a request untouched and streams the answer back: unmatched
// requests, passthrough routes, methods outside the route's `methods`, and
// (with the body already buffered) unkeyed or shadowed requests.

export function passThrough(deps: LifecycleDeps, ctx: RequestContext, body: Buffer | null, done: (ctx: RequestContext) => void): void {
  const req = ctx.req;
  let source: Buffer | IncomingMessage | null = body;
  if (source === null && (req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined)) {
    source = req;
  }
  const t0 = performance.now();
  streamUpstream(deps.upstream, req, ctx.method, source, relayHead, ctx, (e) => {
    ctx.upstreamMs = performance.now() - t0;
    if (e !== null) {
      const res = ctx.res;
      if (clientLeft(e, res)) {
        // Not an upstream failure, and not counted as one.
        ctx.detail = 'the client closed the connection before the response was complete';
      } else if (!res.headersSent) upstreamFailure(ctx, e);
      else {
        ctx.outcome = 'upstream_error';
        ctx.detail = e.message;
        res.destroy();
      }
    }
    done(ctx);
  });
}

/**
 * The response closed before it was finished and nothing destroyed it with
 * an error: the client went away (undici then stops reading). When the
 * upstream breaks off instead, undici destroys the response with its socket
 * error, and the close it reports looks the same.
 */
function clientLeft(e: UpstreamError, res: ServerResponse): boolean {
  return (e.cause as { code?: string } | undefined)?.code === 'ERR_STREAM_PREMATURE_CLOSE' && res.errored == null;
}

/** The upstream answered: its status and headers go to the client, the body follows. */
function relayHead(data: Dispatcher.StreamFactoryData<RequestContext>): Writable {
  const ctx = data.opaque;
  const res = ctx.res;
  ctx.status = data.statusCode;
  if (!res.destroyed) res.writeHead(data.statusCode, clientResponseHeaders(data.headers));
  return res;
}

/** passThrough for the async phases (unkeyed, shadow, store-error requests). */
export function passThroughAsync(deps: LifecycleDeps, ctx: RequestContext, body: Buffer | null): Promise<void> {
  return new Promise((resolve) => passThrough(deps, ctx, body, () => resolve()));
}

export function upstreamFailure(ctx: RequestContext, e: UpstreamError): void {
  ctx.outcome = 'upstream_error';
  ctx.detail = e.message;
  const p = e.kind === 'not_sent' ? Problems.upstreamUnreachable : e.kind === 'timeout' ? Problems.upstreamTimeout : Problems.upstreamReset;
  ctx.status = p.status;
  sendProblem(ctx.res, p, e.message, ctx.requestId);
}
