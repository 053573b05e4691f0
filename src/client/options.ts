import type { Dispatcher } from 'undici';
import { InvalidArgumentError } from './errors.js';

/** Request headers: names are case-insensitive; arrays send several lines. */
export type RequestHeaders = Record<string, string | string[]>;

/** Why an attempt is being retried. */
export interface RetryEvent {
  /** The attempt that just failed (1-based). */
  attempt: number;
  /** How long the client waits before the next attempt. */
  delayMs: number;
  reason: 'status' | 'timeout' | 'network';
  /** The status when `reason` is `status`. */
  status?: number;
  /** The transport error when `reason` is `network` or `timeout`. */
  error?: unknown;
  idempotencyKey: string | null;
}

export interface IdempotentClientOptions {
  /** Origin (and optional path prefix) every request goes to, e.g. `http://127.0.0.1:8080/api`. */
  baseUrl: string | URL;
  /** undici dispatcher to send through (an `Agent`, `Pool`, …). Default: a keep-alive `Agent` owned by the client. */
  dispatcher?: Dispatcher;
  /** Attempts per operation, the first included. Default 5. */
  maxAttempts?: number;
  /** Ceiling of the first backoff; doubles per retry. Default 100 ms. */
  baseDelayMs?: number;
  /** Cap of every wait, `Retry-After` included. Default 10 000 ms. */
  maxDelayMs?: number;
  /** Total budget of one operation, attempts and waits included. Default 30 000 ms. */
  deadlineMs?: number;
  /** Budget of one attempt (response fully read); a timeout is retried. Default 10 000 ms. */
  attemptTimeoutMs?: number;
  /** Header that carries the key. Default `Idempotency-Key`. */
  keyHeader?: string;
  /** Headers sent with every request (per-call headers win). */
  headers?: RequestHeaders;
  /** Source of jitter, `[0, 1)`. Default `Math.random`; tests pass a seeded one. */
  random?: () => number;
  /** Called before each wait; for logging and metrics. Must not throw. */
  onRetry?: (event: RetryEvent) => void;
}

/** Options after validation: every field present, frozen. */
export interface ResolvedOptions {
  origin: string;
  pathPrefix: string;
  dispatcher: Dispatcher | null;
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  deadlineMs: number;
  attemptTimeoutMs: number;
  keyHeader: string;
  headers: Readonly<Record<string, string | string[]>>;
  random: () => number;
  onRetry: ((event: RetryEvent) => void) | null;
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

export function resolveOptions(opts: IdempotentClientOptions): ResolvedOptions {
  if (opts === null || typeof opts !== 'object') throw new InvalidArgumentError('options must be an object');
  let url: URL;
  try {
    url = new URL(opts.baseUrl);
  } catch {
    throw new InvalidArgumentError(`baseUrl is not a URL: ${String(opts.baseUrl)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new InvalidArgumentError('baseUrl must be http: or https:');
  if (url.search !== '' || url.hash !== '') throw new InvalidArgumentError('baseUrl must not have a query or fragment');
  const keyHeader = opts.keyHeader ?? 'Idempotency-Key';
  if (!TOKEN.test(keyHeader)) throw new InvalidArgumentError(`keyHeader is not a header name: ${keyHeader}`);
  for (const fn of ['random', 'onRetry'] as const) {
    if (opts[fn] !== undefined && typeof opts[fn] !== 'function') throw new InvalidArgumentError(`${fn} must be a function`);
  }
  return Object.freeze({
    origin: url.origin,
    pathPrefix: url.pathname.replace(/\/+$/, ''),
    dispatcher: opts.dispatcher ?? null,
    maxAttempts: positiveInt('maxAttempts', opts.maxAttempts, 5),
    baseDelayMs: nonNegative('baseDelayMs', opts.baseDelayMs, 100),
    maxDelayMs: nonNegative('maxDelayMs', opts.maxDelayMs, 10_000),
    deadlineMs: positive('deadlineMs', opts.deadlineMs, 30_000),
    attemptTimeoutMs: positive('attemptTimeoutMs', opts.attemptTimeoutMs, 10_000),
    keyHeader,
    headers: Object.freeze(normalizeHeaders(opts.headers ?? {}, keyHeader)),
    random: opts.random ?? Math.random,
    onRetry: opts.onRetry ?? null,
  });
}

/** Lower-case header names; refuse the key header (the key is an option, not a header). */
export function normalizeHeaders(headers: RequestHeaders, keyHeader: string): Record<string, string | string[]> {
  if (headers === null || typeof headers !== 'object') throw new InvalidArgumentError('headers must be an object');
  const out: Record<string, string | string[]> = {};
  const keyName = keyHeader.toLowerCase();
  for (const [name, value] of Object.entries(headers)) {
    const lower = name.toLowerCase();
    if (lower === keyName) throw new InvalidArgumentError(`pass the key as the idempotencyKey option, not as the ${keyHeader} header`);
    out[lower] = value;
  }
  return out;
}

export function positiveInt(name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback;
  if (!Number.isSafeInteger(v) || v < 1) throw new InvalidArgumentError(`${name} must be an integer >= 1, got ${String(value)}`);
  return v;
}

export function positive(name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new InvalidArgumentError(`${name} must be a number > 0, got ${String(value)}`);
  return v;
}

function nonNegative(name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new InvalidArgumentError(`${name} must be a number >= 0, got ${String(value)}`);
  return v;
}
