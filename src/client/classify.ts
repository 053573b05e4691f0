import { headerValue, isReplayed, type RawResponse } from './response.js';
import { parseRetryAfter } from './retry-after.js';

/** The proxy's problem type for a key whose earlier execution has an unknown outcome. */
export const OUTCOME_UNKNOWN_PROBLEM = 'urn:idempotency-proxy:problem:outcome-unknown';

/** What to do with a response. */
export type ResponseDecision =
  | { kind: 'final' }
  | { kind: 'outcome_unknown' }
  | { kind: 'retry'; retryAfterMs: number | null };

/** Statuses in the 5xx range that retrying cannot fix. */
const PERMANENT_5XX = new Set([501, 505]);

/**
 * Decide a response's fate:
 * - a replay (`Idempotent-Replayed: true`) is the stored answer and is final,
 *   whatever its status: asking again only replays it again;
 * - `409` with the outcome-unknown problem type needs an operator;
 * - `409` (in flight), `429` and `5xx` (except 501/505) are retried, honouring
 *   `Retry-After` when present;
 * - everything else (2xx, 3xx, other 4xx including `400` and `422`) is final.
 */
export function classifyResponse(res: RawResponse, nowMs: number): ResponseDecision {
  const { status } = res;
  if (isReplayed(res.headers)) return { kind: 'final' };
  if (status === 409 && problemType(res) === OUTCOME_UNKNOWN_PROBLEM) return { kind: 'outcome_unknown' };
  if (status === 409 || status === 429 || (status >= 500 && status <= 599 && !PERMANENT_5XX.has(status))) {
    return { kind: 'retry', retryAfterMs: parseRetryAfter(res.headers['retry-after'], nowMs) };
  }
  return { kind: 'final' };
}

/** The RFC 9457 `type` of a JSON problem body, or `undefined`. */
export function problemType(res: RawResponse): string | undefined {
  const contentType = headerValue(res.headers, 'content-type') ?? '';
  if (!/json/i.test(contentType) || res.body.length === 0) return undefined;
  try {
    const parsed: unknown = JSON.parse(res.body.toString('utf8'));
    if (parsed !== null && typeof parsed === 'object' && 'type' in parsed) {
      const type = (parsed as { type: unknown }).type;
      return typeof type === 'string' ? type : undefined;
    }
  } catch {
    // Not JSON after all: no problem type.
  }
  return undefined;
}

/**
 * Transport errors worth retrying: the connection could not be made, was
 * reset or closed (possibly mid-response), or timed out. The key makes the
 * retry safe even when the first attempt reached the server.
 */
const RETRYABLE_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT',
  'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'ENETRESET', 'EAI_AGAIN',
  'ERR_STREAM_PREMATURE_CLOSE',
  'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT', 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH',
]);

export function isRetryableError(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e !== null && typeof e === 'object' && depth < 4; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && RETRYABLE_CODES.has(code)) return true;
    const nested = (e as { errors?: unknown }).errors; // AggregateError from happy-eyeballs connects
    if (Array.isArray(nested) && nested.some(isRetryableError)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}
