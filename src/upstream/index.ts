// idempotency-proxy/upstream: a few lines for Node upstreams on `pg` that
// write to the proxy's PostgreSQL database (docs/co-commit.md, docs/chain.md).
// The SQL functions are the contract; these helpers only call them:
//
//   SELECT idempotency_settle($claim, $status, $headers::jsonb, $body::bytea)
//   SELECT idempotency_step($scope, $key, $ttl::interval)
//
// Both run in the caller's transaction: pass the client the business
// transaction runs on (a pg.Client or a pg.PoolClient after BEGIN).

/** The request header the proxy sends with a request that owns its key. */
export const CLAIM_HEADER = 'idempotency-claim';

/** What the helpers need of a pg.Client / pg.PoolClient. */
export interface Queryable {
  query(text: string, values: unknown[]): Promise<{ rows: unknown[] }>;
}

/** Where the claim comes from: a Node request (req.headers), a headers object, or the token itself. */
export type ClaimSource =
  | string
  | { readonly headers: Readonly<Record<string, string | readonly string[] | undefined>> };

export type HeaderValue = string | number | readonly string[] | undefined;

/** The response to store: what the client would get, and what every retry gets replayed. */
export interface SettledResponse {
  readonly status: number;
  /** Any case; values as Node's res.setHeader takes them. Framing, Date, Set-Cookie and hop-by-hop headers are not stored. */
  readonly headers?: Readonly<Record<string, HeaderValue>>;
  /** Bytes, or a string (sent as UTF-8), or nothing. */
  readonly body?: Buffer | Uint8Array | string | null;
}

const SETTLE_SQL = 'SELECT idempotency_settle($1::text, $2::int, $3::jsonb, $4::bytea) AS settled';
const STEP_SQL = 'SELECT idempotency_step($1::text, $2::text, $3::interval) AS first';

/** The Idempotency-Claim token of a request, or null when it carries none. */
export function claimOf(source: ClaimSource): string | null {
  const v = typeof source === 'string' ? source : source.headers[CLAIM_HEADER];
  return typeof v === 'string' && v !== '' ? v : null;
}

/**
 * Completes the proxy's record of this request inside the caller's
 * transaction: the record commits exactly when the business change does.
 * Call it after the business writes, before COMMIT.
 *
 * - `true`: settled; commit, then answer the request with the same response.
 * - `false`: the claim was fenced (another attempt owns the key now, or the
 *   key is no longer in flight): roll back, the business change must not commit.
 * - `null`: the request carries no Idempotency-Claim (no key, a pass-through
 *   route, or not sent through the proxy): nothing was settled.
 *
 * Throws the database's error for a malformed token, status or header.
 */
export async function settle(client: Queryable, req: ClaimSource, response: SettledResponse): Promise<boolean | null> {
  const claim = claimOf(req);
  if (claim === null) return null;
  const { rows } = await client.query(SETTLE_SQL, [claim, response.status, JSON.stringify(headersJson(response.headers)), bodyBytes(response.body)]);
  return (rows[0] as { settled?: unknown } | undefined)?.settled === true;
}

/**
 * A step marker in the caller's transaction (docs/chain.md). `true`: the
 * first time; do the step's work in this same transaction (a rollback undoes
 * the marker too). `false`: already done, skip it. `ttl`: how long the
 * marker is kept, in milliseconds or as a PostgreSQL interval ('7 days');
 * longer than any redelivery or retry can come.
 */
export async function step(client: Queryable, scope: string, key: string, ttl: number | string): Promise<boolean> {
  const { rows } = await client.query(STEP_SQL, [scope, key, interval(ttl)]);
  return (rows[0] as { first?: unknown } | undefined)?.first === true;
}

function interval(ttl: number | string): string {
  if (typeof ttl === 'string') return ttl;
  if (!Number.isFinite(ttl) || ttl <= 0) throw new RangeError(`step: ttl must be a positive number of milliseconds, got ${ttl}`);
  return `${ttl} milliseconds`;
}

function headersJson(headers: SettledResponse['headers']): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  if (headers === undefined) return out;
  for (const [name, v] of Object.entries(headers)) {
    if (v === undefined) continue;
    const list = (out[name.toLowerCase()] ??= []);
    if (Array.isArray(v)) for (const x of v as readonly string[]) list.push(String(x));
    else list.push(String(v));
  }
  return out;
}

function bodyBytes(body: SettledResponse['body']): Buffer {
  if (body === undefined || body === null) return Buffer.alloc(0);
  if (typeof body === 'string') return Buffer.from(body, 'utf8');
  return Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
}
