import type { ErrorFormat } from '../config/types.js';
import { PROBLEM_CONTENT_TYPE, problemBody, type ProblemDef } from './problems.js';

// The body shape and the headers of the proxy's own answers, one strategy per
// errorFormat (docs/profiles.md), chosen once per route when its plan is
// compiled: RFC 9457 problem+json (ietf), Stripe's {"error":{…}} envelope,
// ACP's flat {type, code, message}. The raw-socket refusals have no route and
// are always problem+json.

/** What one occurrence of a problem says, in any shape. */
export interface Occurrence {
  readonly detail: string;
  readonly requestId: string;
  readonly status: number;
  /** The idempotency key, when one was read. */
  readonly key: string | null;
  readonly retryable: boolean;
  readonly extra?: Record<string, unknown>;
}

export interface Dialect {
  readonly format: ErrorFormat;
  readonly contentType: string;
  /** The JSON body of a problem. */
  body(p: ProblemDef, o: Occurrence): string;
  /** Header pairs a problem carries besides the common ones. */
  problemHeaders(retryable: boolean): readonly string[];
  /** Header pairs a replay (or a stored record's first answer) carries: the answer is final for its key. */
  readonly replayHeaders: readonly string[];
}

const NONE: readonly string[] = [];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** `instance`: a URN naming this occurrence by its request id (urn:uuid: for the UUIDs the proxy makes). */
export function instanceOf(requestId: string): string {
  return UUID.test(requestId) ? `urn:uuid:${requestId}` : `urn:idempotency-proxy:request:${encodeURIComponent(requestId)}`;
}

const code = (p: ProblemDef): string => p.slug.replace(/-/g, '_');

export const problemDialect: Dialect = {
  format: 'problem',
  contentType: PROBLEM_CONTENT_TYPE,
  body: (p, o) => {
    const b: Record<string, unknown> = problemBody(p, o.detail, o.requestId, o.status);
    b.instance = instanceOf(o.requestId);
    b.retryable = o.retryable;
    if (o.key !== null) b.idempotency_key = o.key;
    return JSON.stringify(o.extra === undefined ? b : { ...b, ...o.extra });
  },
  problemHeaders: () => NONE,
  replayHeaders: NONE,
};

// Stripe's error types and codes for what the proxy answers itself.
const STRIPE: Readonly<Record<string, { type: string; code?: string }>> = {
  'key-mismatch': { type: 'idempotency_error' },
  'in-flight': { type: 'invalid_request_error', code: 'idempotency_key_in_use' },
};
const SHOULD_RETRY = ['stripe-should-retry', 'true'] as const;
const SHOULD_NOT_RETRY = ['stripe-should-retry', 'false'] as const;

export const stripeDialect: Dialect = {
  format: 'stripe',
  contentType: 'application/json',
  body: (p, o) => {
    const known = STRIPE[p.slug];
    const type = known?.type ?? (o.status >= 500 ? 'api_error' : 'invalid_request_error');
    const c = known === undefined ? code(p) : known.code;
    return JSON.stringify({ error: { type, ...(c === undefined ? {} : { code: c }), message: o.detail, ...o.extra } });
  },
  problemHeaders: (retryable) => (retryable ? SHOULD_RETRY : SHOULD_NOT_RETRY),
  replayHeaders: SHOULD_NOT_RETRY,
};

// ACP §6.4's codes; the other answers keep the catalogue's slug as their code.
const ACP_CODES: Readonly<Record<string, string>> = {
  'key-missing': 'idempotency_key_required',
  'key-mismatch': 'idempotency_conflict',
  'in-flight': 'idempotency_in_flight',
};

export const acpDialect: Dialect = {
  format: 'acp',
  contentType: 'application/json',
  body: (p, o) => {
    const type = o.status === 503 ? 'service_unavailable' : o.status >= 500 ? 'processing_error' : 'invalid_request';
    return JSON.stringify({ type, code: ACP_CODES[p.slug] ?? code(p), message: o.detail, ...o.extra });
  },
  problemHeaders: () => NONE,
  replayHeaders: NONE,
};

export function dialectFor(format: ErrorFormat): Dialect {
  return format === 'stripe' ? stripeDialect : format === 'acp' ? acpDialect : problemDialect;
}
