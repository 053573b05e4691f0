import { StoreUnavailableError, UpstreamError } from '../errors.js';
import type { StoredResponse } from '../store/records.js';
import type { Dialect } from './dialects.js';

// The catalogue of errors the proxy itself produces, as RFC 9457 problem
// details. One entry per case, a stable `type` URI each; docs/problems.md is
// kept in step by test/http/problems.test.ts. They are written by
// src/http/respond.ts, the one writer of the proxy's own answers.

export const PROBLEM_BASE = 'urn:idempotency-proxy:problem:';

export interface ProblemDef {
  readonly slug: string;
  readonly status: number;
  readonly title: string;
  /** Whether the same request may be sent again unchanged (the `retryable` member; a verdict may say otherwise). */
  readonly retryable: boolean;
}

function def(slug: string, status: number, title: string, retryable = false): ProblemDef {
  return { slug, status, title, retryable };
}

export const Problems = {
  keyMissing: def('key-missing', 400, 'Idempotency key required'),
  keyMalformed: def('key-malformed', 400, 'Malformed idempotency key'),
  keyBodyNotJson: def('key-body-not-json', 400, 'Body is not JSON'),
  keyPointerMissing: def('key-pointer-missing', 400, 'Idempotency key field missing from body'),
  bodyIncomplete: def('body-incomplete', 400, 'Request body incomplete'),
  bodyTooLarge: def('body-too-large', 413, 'Request body too large'),
  keyMismatch: def('key-mismatch', 422, 'Idempotency key reused with a different request'),
  inFlight: def('in-flight', 409, 'Request with this idempotency key is in progress', true),
  outcomeUnknown: def('outcome-unknown', 409, 'Outcome of the original request is unknown'),
  executedUnrecorded: def('executed-unrecorded', 409, 'Operation executed; its response was not recorded'),
  storeUnavailable: def('store-unavailable', 503, 'Idempotency key store unavailable', true),
  overloaded: def('overloaded', 503, 'Proxy memory budget exhausted', true),
  upstreamUnreachable: def('upstream-unreachable', 502, 'Upstream unreachable', true),
  upstreamTimeout: def('upstream-timeout', 504, 'Upstream timed out'),
  upstreamReset: def('upstream-reset', 502, 'Upstream connection failed'),
  bodyNotRetained: def('body-not-retained', 0, 'Response body was not retained'),
  referenceUnavailable: def('reference-unavailable', 502, 'Referenced resource could not be fetched', true),
  referenceGone: def('reference-gone', 410, 'Referenced resource no longer exists'),
  internal: def('internal-error', 500, 'Internal proxy error', true),
  badRequest: def('bad-request', 400, 'Malformed HTTP request'),
  headersTooLarge: def('headers-too-large', 431, 'Request header fields too large'),
  requestTimeout: def('request-timeout', 408, 'Request not received in time', true),
  transferCodingUnsupported: def('transfer-coding-unsupported', 501, 'Transfer coding not supported'),
  methodNotAllowed: def('method-not-allowed', 405, 'Method not allowed'),
} as const satisfies Record<string, ProblemDef>;

export interface ProblemBody {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  readonly requestId: string;
  readonly [k: string]: unknown;
}

export function problemBody(p: ProblemDef, detail: string, requestId: string, status = p.status, extra?: Record<string, unknown>): ProblemBody {
  return { type: PROBLEM_BASE + p.slug, title: p.title, status, detail, requestId, ...extra };
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** The problem for a failed upstream exchange, by when it failed. */
export function upstreamProblem(e: UpstreamError): ProblemDef {
  return e.kind === 'not_sent' ? Problems.upstreamUnreachable : e.kind === 'timeout' ? Problems.upstreamTimeout : Problems.upstreamReset;
}

/**
 * The one mapping from a fault to the problem a client gets: upstream
 * failures by when they happened, an unreachable store as 503, anything else
 * (the claim giving up, a bug) as 500.
 */
export function problemFor(err: unknown): ProblemDef {
  if (err instanceof UpstreamError) return upstreamProblem(err);
  if (err instanceof StoreUnavailableError) return Problems.storeUnavailable;
  return Problems.internal;
}

/**
 * A problem kept as a key's record (a 502/504 whose upstream outcome is
 * unknown): answered first and replayed later as it was stored, with the
 * headers every proxy-made problem carries.
 */
export function problemRecord(d: Dialect, p: ProblemDef, detail: string, requestId: string, key: string | null): StoredResponse {
  // Bound to the key: sending the request again gets this same answer.
  const body = Buffer.from(d.body(p, { detail, requestId, status: p.status, key, retryable: false }));
  return {
    status: p.status,
    headers: [['content-type', d.contentType], ['cache-control', 'no-store']],
    body,
    bodyRetained: true,
    bodySize: body.length,
  };
}
