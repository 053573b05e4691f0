/** Response headers as undici gives them: lower-case names, repeated lines as arrays. */
export type ResponseHeaders = Record<string, string | string[] | undefined>;

/** One HTTP answer as read off the wire by an attempt. */
export interface RawResponse {
  status: number;
  headers: ResponseHeaders;
  body: Buffer;
}

/** Extra facts the retry loop knows about a response. */
export interface ResponseFacts {
  attempts: number;
  idempotencyKey: string | null;
  /** A `404` to a `DELETE` whose earlier attempt may already have deleted. */
  deletedEarlier: boolean;
}

/** The final answer to one logical operation. */
export class IdempotentResponse {
  readonly status: number;
  readonly headers: ResponseHeaders;
  readonly body: Buffer;
  /** `true` when the proxy answered from its stored record (`Idempotent-Replayed: true`). */
  readonly replayed: boolean;
  /** Attempts it took, this one included. */
  readonly attempts: number;
  /** The key every attempt carried; `null` for methods sent without one. */
  readonly idempotencyKey: string | null;
  /**
   * `true` for `2xx`, and for a `404` to a retried `DELETE` (an earlier attempt
   * whose answer was lost most likely deleted the resource).
   */
  readonly ok: boolean;

  constructor(raw: RawResponse, facts: ResponseFacts) {
    this.status = raw.status;
    this.headers = raw.headers;
    this.body = raw.body;
    this.replayed = isReplayed(raw.headers);
    this.attempts = facts.attempts;
    this.idempotencyKey = facts.idempotencyKey;
    this.ok = (raw.status >= 200 && raw.status < 300) || facts.deletedEarlier;
  }

  /** The body decoded as UTF-8. */
  text(): string {
    return this.body.toString('utf8');
  }

  /** The body parsed as JSON (throws `SyntaxError` when it is not JSON). */
  json<T = unknown>(): T {
    return JSON.parse(this.text()) as T;
  }
}

export function headerValue(headers: ResponseHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export function isReplayed(headers: ResponseHeaders): boolean {
  return headerValue(headers, 'idempotent-replayed')?.trim().toLowerCase() === 'true';
}
