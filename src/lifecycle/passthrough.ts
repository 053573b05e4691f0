import type { IncomingMessage } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { callUpstream } from '../proxy/forward.js';
import { clientResponseHeaders } from '../proxy/headers.js';
import { UpstreamError, classify } from '../proxy/upstream.js';
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
  let call;
  try {
    call = await callUpstream(deps.upstream, req, ctx.method, source);
  } catch (err) {
    ctx.upstreamMs = performance.now() - t0;
    upstreamFailure(ctx, err as UpstreamError);
    return;
  }
  const { response } = call;
  try {
    const headers = clientResponseHeaders(response.headers);
    ctx.status = response.statusCode;
    ctx.res.writeHead(response.statusCode, headers);
    await pipeline(response.body, ctx.res);
  } catch (err) {
    const e = classify(err, call.signal);
    ctx.outcome = 'upstream_error';
    ctx.detail = e.message;
    if (!ctx.res.headersSent) upstreamFailure(ctx, e);
    else ctx.res.destroy();
    response.body.destroy();
  } finally {
    call.finish();
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
