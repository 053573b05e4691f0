import type { IncomingMessage } from 'node:http';
import type { Dispatcher } from 'undici';
import type { Upstream } from './upstream.js';
import { TimeoutSignal, classify } from './upstream.js';
import { upstreamRequestHeaders } from './headers.js';

// Sends one request to the upstream. `upstream.timeout` bounds the exchange:
// undici's headersTimeout bounds the wait for the answer, and the rest of the
// budget bounds the body — a plain timer that destroys the body stream, no
// AbortController per request (an EventTarget is costly on the hot path).
// Errors come out classified (UpstreamError). The pass-through path relays
// with its own dispatch handler instead (relay.ts).

export interface UpstreamCall {
  readonly response: Dispatcher.ResponseData;
  /** Disarms the body timer; call once the body was read or abandoned. */
  finish(): void;
}

/** The request headers for the upstream (headers.ts rules) from what the client sent. */
export function forwardHeaders(req: IncomingMessage, body: Buffer | IncomingMessage | null): string[] {
  const socket = req.socket;
  return upstreamRequestHeaders(req.rawHeaders, req.headers, {
    clientIp: socket.remoteAddress ?? '',
    proto: (socket as { encrypted?: boolean }).encrypted ? 'https' : 'http',
    host: req.headers.host,
  }, Buffer.isBuffer(body));
}

export async function callUpstream(
  upstream: Upstream,
  req: IncomingMessage,
  method: string,
  body: Buffer | IncomingMessage | null,
): Promise<UpstreamCall> {
  const started = performance.now();
  let response: Dispatcher.ResponseData;
  try {
    response = await upstream.pool.request({
      origin: upstream.origin,
      path: req.url ?? '/',
      method: method as Dispatcher.HttpMethod,
      headers: forwardHeaders(req, body),
      body,
    });
  } catch (err) {
    throw classify(err);
  }
  const left = Math.max(1, upstream.timeoutMs - (performance.now() - started));
  const timer = setTimeout(() => response.body.destroy(new TimeoutSignal(upstream.timeoutMs)), left);
  return { response, finish: () => clearTimeout(timer) };
}
