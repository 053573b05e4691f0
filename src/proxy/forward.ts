import type { IncomingMessage } from 'node:http';
import type { Dispatcher } from 'undici';
import { upstreamRequestHeaders } from './headers.js';
import type { Upstream } from './upstream.js';

// What goes upstream: the request headers (headers.ts rules) from what the
// client sent, plus headers the proxy adds, and the dispatch itself. The
// answer is the handler's: relay-handler.ts or record-handler.ts.

/** The request headers for the upstream from what the client sent, then `extra` ([name, value, …]). */
export function forwardHeaders(req: IncomingMessage, body: Buffer | IncomingMessage | null, extra: readonly string[] | null): string[] {
  const socket = req.socket;
  const headers = upstreamRequestHeaders(req.rawHeaders, req.headers, {
    clientIp: socket.remoteAddress ?? '',
    proto: (socket as { encrypted?: boolean }).encrypted ? 'https' : 'http',
    host: req.headers.host,
  }, Buffer.isBuffer(body), extra !== null && sendsTraceContext(extra));
  if (extra !== null) for (const h of extra) headers.push(h);
  return headers;
}

/** Whether the proxy adds its own traceparent (docs/operations.md, Tracing): it replaces the client's. */
function sendsTraceContext(extra: readonly string[]): boolean {
  for (let i = 0; i < extra.length; i += 2) if (extra[i] === 'traceparent') return true;
  return false;
}

/**
 * Sends `req` upstream with `body`; `handler` gets the answer (a synchronous refusal too, as onError). False: the
 * pool was saturated, every upstream connection busy, so the request may wait in its queue (undici's
 * Dispatcher#dispatch: "false if the dispatcher is busy"); true: it went to a free connection (or was refused).
 */
export function dispatch(
  upstream: Upstream,
  req: IncomingMessage,
  body: Buffer | IncomingMessage | null,
  extra: readonly string[] | null,
  handler: Dispatcher.DispatchHandler,
): boolean {
  try {
    return upstream.pool.dispatch(
      { origin: upstream.origin, path: req.url ?? '/', method: (req.method ?? 'GET') as Dispatcher.HttpMethod, headers: forwardHeaders(req, body, extra), body },
      handler,
    );
  } catch (err) {
    handler.onError!(err as Error);
    return true;
  }
}
