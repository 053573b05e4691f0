import { randomUUID } from 'node:crypto';
import type { Dispatcher } from 'undici';
import type { AttemptRequest } from './attempt.js';
import { InvalidArgumentError } from './errors.js';
import { normalizeHeaders, positive, positiveInt, type RequestHeaders, type ResolvedOptions } from './options.js';

/** Methods the client sends. POST and PATCH carry the key; the others are idempotent by definition. */
export type Method = 'GET' | 'HEAD' | 'OPTIONS' | 'PUT' | 'DELETE' | 'POST' | 'PATCH';

const KEYED: ReadonlySet<string> = new Set(['POST', 'PATCH']);
const UNKEYED: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE']);
/** What the proxy accepts: 1–255 visible ASCII characters. */
const VALID_KEY = /^[\x21-\x7e]{1,255}$/;

/** Per-call options. */
export interface CallOptions {
  headers?: RequestHeaders;
  /** Raw body; must be buffered, since every retry sends it again. */
  body?: string | Uint8Array;
  /** A value sent as JSON (sets `content-type: application/json` unless given). */
  json?: unknown;
  /**
   * The operation's key (POST/PATCH only), e.g. derived from your own order or
   * cart id. Omitted: a fresh UUID v4. Never derive it from the body.
   */
  idempotencyKey?: string;
  /** Cancels waiting and the in-flight attempt. */
  signal?: AbortSignal;
  deadlineMs?: number;
  maxAttempts?: number;
  attemptTimeoutMs?: number;
}

export interface RequestOptions extends CallOptions {
  method: Method;
  /** Path (and query) under the base URL, starting with `/`. */
  path: string;
}

/** One logical operation, validated once, replayed unchanged on every attempt. */
export interface PreparedOperation {
  request: AttemptRequest;
  idempotencyKey: string | null;
  signal: AbortSignal | undefined;
  deadlineMs: number;
  maxAttempts: number;
  attemptTimeoutMs: number;
}

export function prepareOperation(opts: RequestOptions, client: ResolvedOptions, dispatcher: Dispatcher): PreparedOperation {
  if (opts === null || typeof opts !== 'object') throw new InvalidArgumentError('request options must be an object');
  const method = String(opts.method).toUpperCase();
  const keyed = KEYED.has(method);
  if (!keyed && !UNKEYED.has(method)) throw new InvalidArgumentError(`unsupported method: ${String(opts.method)}`);
  if (typeof opts.path !== 'string' || !opts.path.startsWith('/')) throw new InvalidArgumentError('path must start with "/"');
  if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal)) throw new InvalidArgumentError('signal must be an AbortSignal');

  const headers = { ...client.headers, ...normalizeHeaders(opts.headers ?? {}, client.keyHeader) };
  const body = encodeBody(opts, headers);
  const idempotencyKey = keyed ? chooseKey(opts.idempotencyKey) : refuseKey(method, opts.idempotencyKey);
  if (idempotencyKey !== null) headers[client.keyHeader.toLowerCase()] = idempotencyKey;

  return {
    request: {
      dispatcher,
      origin: client.origin,
      path: client.pathPrefix + opts.path,
      method: method as Dispatcher.HttpMethod,
      headers,
      body,
    },
    idempotencyKey,
    signal: opts.signal,
    deadlineMs: positive('deadlineMs', opts.deadlineMs, client.deadlineMs),
    maxAttempts: positiveInt('maxAttempts', opts.maxAttempts, client.maxAttempts),
    attemptTimeoutMs: positive('attemptTimeoutMs', opts.attemptTimeoutMs, client.attemptTimeoutMs),
  };
}

function encodeBody(opts: RequestOptions, headers: Record<string, string | string[]>): Buffer | null {
  if (opts.json !== undefined) {
    if (opts.body !== undefined) throw new InvalidArgumentError('pass either body or json, not both');
    headers['content-type'] ??= 'application/json';
    return Buffer.from(JSON.stringify(opts.json), 'utf8');
  }
  if (opts.body === undefined) return null;
  if (typeof opts.body === 'string') return Buffer.from(opts.body, 'utf8');
  if (opts.body instanceof Uint8Array) return Buffer.from(opts.body); // a copy: later edits by the caller cannot change a retry
  throw new InvalidArgumentError('body must be a string or a Uint8Array (streams cannot be re-sent on retry)');
}

function chooseKey(given: string | undefined): string {
  if (given === undefined) return randomUUID();
  if (typeof given !== 'string' || !VALID_KEY.test(given)) {
    throw new InvalidArgumentError('idempotencyKey must be 1-255 visible ASCII characters');
  }
  return given;
}

function refuseKey(method: string, given: string | undefined): null {
  if (given !== undefined) throw new InvalidArgumentError(`${method} is idempotent and is sent without a key; idempotencyKey is for POST and PATCH`);
  return null;
}
