import type { IncomingMessage } from 'node:http';
import { streamUpstream } from '../proxy/forward.js';
import { clientResponseHeaders } from '../proxy/headers.js';
import type { UpstreamError } from '../proxy/upstream.js';
import { Problems, sendProblem } from '../http/problems.js';
import type { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';

// Forwards a request untouched and streams the answer back: unmatched
// requests, passthrough routes, methods outside the route's `methods`, and
// (with the body already buffered) unkeyed or shadowed requests.

export async function passThrough(deps: LifecycleDeps, ctx: RequestContext, body: Buffer | null): Promise<void> {
  const req = ctx.req;
  let source: Buffer | IncomingMessage | null = body;
  if (source === null && (req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined)) {
    source = req;
  }
  const t0 = performance.now();
  const res = ctx.res;
  try {
    await streamUpstream(deps.upstream, req, ctx.method, source, (statusCode, headers) => {
      ctx.status = statusCode;
      if (!res.destroyed) res.writeHead(statusCode, clientResponseHeaders(headers));
      return res;
    });
  } catch (err) {
    const e = err as UpstreamError;
    if (!res.headersSent) upstreamFailure(ctx, e);
    else {
      ctx.outcome = 'upstream_error';
      ctx.detail = e.message;
      res.destroy();
    }
  } finally {
    ctx.upstreamMs = performance.now() - t0;
  }
}

export function upstreamFailure(ctx: RequestContext, e: UpstreamError): void {
  ctx.outcome = 'upstream_error';
  ctx.detail = e.message;
  const p = e.kind === 'not_sent' ? Problems.upstreamUnreachable : e.kind === 'timeout' ? Problems.upstreamTimeout : Problems.upstreamReset;
  ctx.status = p.status;
  sendProblem(ctx.res, p, e.message, ctx.requestId);
}
