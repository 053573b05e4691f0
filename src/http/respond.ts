import { STATUS_CODES, type ServerResponse } from 'node:http';
import { constants as h2, type ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import { ownHeaderCount } from '../proxy/headers.js';
import type { StoredResponse } from '../store/records.js';
import { problemDialect, type Dialect } from './dialects.js';
import { Problems, type ProblemDef } from './problems.js';

// The one writer of the answers the proxy makes itself: problems (on a
// response, or raw on a socket the HTTP parser refused), replays of stored
// records, and the first answer of a stored problem record. Every one of them
// carries X-Request-Id; every proxy-made problem carries Cache-Control:
// no-store (docs/problems.md). Answers the upstream made are relayed by
// src/proxy/, never written here. The body shape and the dialect's own
// headers are the route's Dialect (src/http/dialects.ts, docs/profiles.md).

export interface ProblemOptions {
  /** Overrides the catalogue status (mismatchStatus: 400). */
  readonly status?: number;
  /** Seconds; sent as Retry-After (at least 1). */
  readonly retryAfterS?: number;
  /** Connection: close after this answer (framing and body-size refusals). */
  readonly close?: boolean;
  readonly extra?: Record<string, unknown>;
  /** The idempotency key the request carried (null: none was read). */
  readonly key?: string | null;
  /** Overrides the catalogue's `retryable` for this occurrence. */
  readonly retryable?: boolean;
  /** A key to echo as Idempotency-Key (echoKey routes), or null. */
  readonly echo?: string | null;
}

/**
 * Cuts a response already under way, so that its client reads it as broken, never as complete. Over HTTP/2 the
 * stream is reset with INTERNAL_ERROR: destroying it without an error resets it with NO_ERROR, which Node's own
 * client reads as a whole response. Over HTTP/1.x in clear text the connection is reset (TCP RST), not closed: a
 * body framed by the connection's close (an HTTP/1.0 client's, without Content-Length) would end as if whole at a
 * FIN. Over TLS the socket is destroyed without a close_notify, which a careful client reads as a truncation.
 */
export function cutResponse(res: ServerResponse): void {
  const stream = (res as { stream?: ServerHttp2Stream }).stream;
  if (stream !== undefined) {
    if (!stream.destroyed) stream.close(h2.NGHTTP2_INTERNAL_ERROR);
    return;
  }
  const socket = res.socket as (Socket & { encrypted?: boolean }) | null;
  if (socket !== null && !socket.destroyed && socket.encrypted !== true) socket.resetAndDestroy();
  else res.destroy();
}

/** A proxy-made problem on a response that has not started; one already under way is cut instead. */
export function respondProblem(res: ServerResponse, d: Dialect, p: ProblemDef, detail: string, requestId: string, opts: ProblemOptions = {}): void {
  if (res.headersSent) {
    cutResponse(res);
    return;
  }
  const status = opts.status ?? p.status;
  const retryable = opts.retryable ?? p.retryable;
  const body = d.body(p, { detail, requestId, status, key: opts.key ?? null, retryable, extra: opts.extra });
  // HTTP/2 has no Connection header (the stream ends; the session stays).
  const close = opts.close === true && res.req?.httpVersionMajor !== 2;
  const headers = problemHeaders(d.contentType, Buffer.byteLength(body), requestId, opts, close);
  headers.push(...d.problemHeaders(retryable));
  if (opts.echo != null) headers.push('idempotency-key', opts.echo);
  res.writeHead(status, headers);
  res.end(body);
}

/**
 * The same problem as raw HTTP/1.1 bytes, for a socket Node's parser refused
 * (there is no response object) or a CONNECT: always closes the connection.
 */
export function rawProblem(p: ProblemDef, detail: string, requestId: string): string {
  const body = problemDialect.body(p, { detail, requestId, status: p.status, key: null, retryable: p.retryable });
  const h = problemHeaders(problemDialect.contentType, Buffer.byteLength(body), requestId, { close: true });
  let head = `HTTP/1.1 ${p.status} ${STATUS_CODES[p.status] ?? 'Error'}\r\n`;
  for (let i = 0; i < h.length; i += 2) head += `${h[i]}: ${h[i + 1]}\r\n`;
  return `${head}\r\n${body}`;
}

function problemHeaders(contentType: string, length: number, requestId: string, opts: ProblemOptions, close = opts.close === true): string[] {
  const h = ['content-type', contentType, 'content-length', String(length), 'x-request-id', requestId, 'cache-control', 'no-store'];
  if (opts.retryAfterS !== undefined) h.push('retry-after', String(Math.max(1, Math.ceil(opts.retryAfterS))));
  if (close) h.push('connection', 'close');
  return h;
}

/** The first answer of a record the proxy stored itself (a 502/504 problem record), as stored. */
export function respondRecord(res: ServerResponse, d: Dialect, record: StoredResponse, requestId: string, echo: string | null): void {
  const flat: string[] = [];
  for (const [n, v] of record.headers) flat.push(n, v);
  flat.push('content-length', String(record.body.length), 'x-request-id', requestId, ...d.replayHeaders);
  if (echo !== null) flat.push('idempotency-key', echo);
  res.writeHead(record.status, flat);
  res.end(record.body);
}

/**
 * Headers that describe the original body and would be false for the small
 * problem body that replaces it (a digest that does not match, a download
 * file name for a JSON problem).
 */
const DESCRIBES_ORIGINAL_BODY: ReadonlySet<string> = new Set([
  'content-type', 'content-encoding', 'content-md5', 'etag', 'content-range', 'content-disposition',
  'digest', 'content-digest', 'repr-digest',
]);

/**
 * A duplicate answered with the stored record: status, stored headers (several
 * lines of one name stay several), body byte for byte, Idempotent-Replayed.
 */
export function respondReplay(res: ServerResponse, d: Dialect, stored: StoredResponse, requestId: string, key: string | null, echo: boolean): void {
  const flat: string[] = [];
  let body = stored.body;
  // The proxy's reserved entries come last (the original execution's trace context, docs/operations.md, Tracing): never replayed.
  const h = stored.headers;
  const n = ownHeaderCount(h);
  if (stored.bodyRetained) {
    for (let i = 0; i < n; i++) flat.push(h[i]![0], h[i]![1]);
  } else {
    // The original body was over maxStoredResponseBytes: original status and
    // headers, with a small problem body in place of the original one.
    const end = ownHeaderCount(h);
    for (let i = 0; i < end; i++) {
      if (!DESCRIBES_ORIGINAL_BODY.has(h[i]![0])) flat.push(h[i]![0], h[i]![1]);
    }
    flat.push('content-type', d.contentType);
    body = Buffer.from(d.body(Problems.bodyNotRetained, {
      detail: `the original response body (${stored.bodySize} bytes) was larger than this route's maxStoredResponseBytes and was not retained; the operation was not run again`,
      requestId,
      status: stored.status,
      key,
      retryable: false,
      extra: { originalBodyBytes: stored.bodySize },
    }));
  }
  // RFC 9110 §8.6: no Content-Length in a 204 or 304 (nor a body).
  if (stored.status !== 204 && stored.status !== 304) flat.push('content-length', String(body.length));
  flat.push('idempotent-replayed', 'true', 'x-request-id', requestId, ...d.replayHeaders);
  if (echo && key !== null && !stored.headers.some(([n]) => n === 'idempotency-key')) flat.push('idempotency-key', key);
  res.writeHead(stored.status, flat);
  res.end(body);
}

/** The headers of the current body a reference replay answers with, taken from the upstream's GET. */
const CURRENT_BODY_HEADERS: ReadonlySet<string> = new Set(['content-type', 'content-length', 'content-encoding', 'etag', 'last-modified']);

/**
 * The head of a duplicate answered from a reference record: the original
 * status and stored headers (those describing the original body left out),
 * the body headers of the upstream's GET (its raw header lines), and
 * Idempotent-Replayed. The GET's body follows it (src/proxy/reference.ts
 * relays it).
 */
export function referenceReplayHead(d: Dialect, stored: StoredResponse, requestId: string, key: string | null, echo: boolean, current: readonly Buffer[]): string[] {
  const flat: string[] = [];
  const h = stored.headers;
  const end = ownHeaderCount(h);
  for (let i = 0; i < end; i++) {
    const name = h[i]![0];
    if (!DESCRIBES_ORIGINAL_BODY.has(name) && name !== 'last-modified') flat.push(name, h[i]![1]);
  }
  for (let i = 0; i < current.length; i += 2) {
    const name = current[i]!.toString('latin1').toLowerCase();
    if (CURRENT_BODY_HEADERS.has(name)) flat.push(name, current[i + 1]!.toString('latin1'));
  }
  flat.push('idempotent-replayed', 'true', 'x-request-id', requestId, ...d.replayHeaders);
  if (echo && key !== null && !h.some(([n]) => n === 'idempotency-key')) flat.push('idempotency-key', key);
  return flat;
}
