import type { IncomingMessage } from 'node:http';
import type { Writable } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { Upstream } from './upstream.js';
import { TimeoutSignal, classify } from './upstream.js';
import { upstreamRequestHeaders } from './headers.js';

// Sends one request to the upstream. `upstream.timeout` bounds the whole
// exchange: the timer runs until the caller has read the body and calls
// finish(). Errors come out classified (UpstreamError).

export interface UpstreamCall {
  readonly response: Dispatcher.ResponseData;
  readonly signal: AbortSignal;
  /** Stops the exchange timer; call once the body was read or abandoned. */
  finish(): void;
}

export async function callUpstream(
  upstream: Upstream,
  req: IncomingMessage,
  method: string,
  body: Buffer | IncomingMessage | null,
): Promise<UpstreamCall> {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(new TimeoutSignal(upstream.timeoutMs)), upstream.timeoutMs);
  const socket = req.socket;
  const headers = upstreamRequestHeaders(req.rawHeaders, req.headers, {
    clientIp: socket.remoteAddress ?? '',
    proto: (socket as { encrypted?: boolean }).encrypted ? 'https' : 'http',
    host: req.headers.host,
  }, Buffer.isBuffer(body));
  try {
    const response = await upstream.pool.request({
      origin: upstream.origin,
      path: req.url ?? '/',
      method: method as Dispatcher.HttpMethod,
      headers,
      body,
      signal: ac.signal,
    });
    return { response, signal: ac.signal, finish: () => clearTimeout(timer) };
  } catch (err) {
    clearTimeout(timer);
    throw classify(err, ac.signal);
  }
}

/**
 * Streams an exchange straight into a Writable (the pass-through path: no
 * body collected, no stream pipeline). `factory` gets status and headers and
 * returns where the body goes. Errors come out classified.
 */
export async function streamUpstream(
  upstream: Upstream,
  req: IncomingMessage,
  method: string,
  body: Buffer | IncomingMessage | null,
  factory: (statusCode: number, headers: Record<string, string | string[] | undefined>) => Writable,
): Promise<void> {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(new TimeoutSignal(upstream.timeoutMs)), upstream.timeoutMs);
  const socket = req.socket;
  const headers = upstreamRequestHeaders(req.rawHeaders, req.headers, {
    clientIp: socket.remoteAddress ?? '',
    proto: (socket as { encrypted?: boolean }).encrypted ? 'https' : 'http',
    host: req.headers.host,
  }, Buffer.isBuffer(body));
  try {
    await upstream.pool.stream(
      { origin: upstream.origin, path: req.url ?? '/', method: method as Dispatcher.HttpMethod, headers, body, signal: ac.signal },
      (data) => factory(data.statusCode, data.headers),
    );
  } catch (err) {
    throw classify(err, ac.signal);
  } finally {
    clearTimeout(timer);
  }
}
