import type { IncomingMessage } from 'node:http';
import type { Writable } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { Upstream } from './upstream.js';
import { TimeoutSignal, classify } from './upstream.js';
import { upstreamRequestHeaders } from './headers.js';

// Sends one request to the upstream. `upstream.timeout` bounds the exchange:
// undici's headersTimeout bounds the wait for the answer, and the rest of the
// budget bounds the body — a plain timer that destroys the body stream, no
// AbortController per request (an EventTarget is costly on the hot path).
// Errors come out classified (UpstreamError).

export interface UpstreamCall {
  readonly response: Dispatcher.ResponseData;
  /** Disarms the body timer; call once the body was read or abandoned. */
  finish(): void;
}

function forwardHeaders(req: IncomingMessage, body: Buffer | IncomingMessage | null): string[] {
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

/**
 * Streams an exchange straight into a Writable (the pass-through path: no
 * body collected, no stream pipeline). `factory` gets status and headers and
 * returns where the body goes. Bounded by undici's headers and body
 * timeouts (upstream.timeout each). Errors come out classified.
 */
export async function streamUpstream(
  upstream: Upstream,
  req: IncomingMessage,
  method: string,
  body: Buffer | IncomingMessage | null,
  factory: (statusCode: number, headers: Record<string, string | string[] | undefined>) => Writable,
): Promise<void> {
  try {
    await upstream.pool.stream(
      { origin: upstream.origin, path: req.url ?? '/', method: method as Dispatcher.HttpMethod, headers: forwardHeaders(req, body), body },
      (data) => factory(data.statusCode, data.headers),
    );
  } catch (err) {
    throw classify(err);
  }
}
