import type { Statement } from '../db/port.js';

// The claim of one tenant's keys, in single-tenant statements (every
// reference to the table filters on tenant_id = $1, so on Citus each is
// router-planned to the one shard that holds the tenant; docs/scale.md):
//
// 1. new: INSERT ... VALUES ... ON CONFLICT DO NOTHING. A new key (the usual
//    case) is claimed by this one statement. A key that has a row is left
//    alone without a row lock: the conflict is found before anything is
//    written, so a statement of nothing but duplicates writes nothing (no
//    transaction id, no WAL flush).
// 2. found, for the keys the insert left alone: their rows as they stand,
//    with the statement's clock and the time tests the claim depends on. A
//    row settled for this request — complete or outcome_unknown within its
//    retention, in flight under a live lease, or in flight under another
//    fingerprint — is answered from it.
// 3. takeover, for the rest only: INSERT ... ON CONFLICT DO UPDATE ... WHERE
//    <takeover>, which takes over a row whose retention expired (unless it
//    is in flight under a live lease), takes over an in_flight row whose
//    lease ran out with the same fingerprint (on_expired_lease = reexecute)
//    or marks it outcome_unknown (= fail), or leaves it alone (a concurrent
//    claim changed it: the store claims again).
//
// One clock per row: the takeover compares times with the clock of the
// found statement that read the rows (passed as $1, epoch seconds to the
// microsecond); a new row's times come from the insert's own now() ($1
// NULL). Every comparison inside an insert reads EXCLUDED.created_at, the
// row's clock, never now() (Citus refuses STABLE functions in ON CONFLICT
// ... SET/WHERE, and evaluates a write's now() on the coordinator but a
// read's on the worker: one value read once keeps the tests of a row in
// agreement).
// Rows are inserted (and locked) in the order of the VALUES list, which the
// store sorts by key, the order every statement of the store locks rows in:
// overlapping batches wait for each other but never deadlock.

const foundText = (keyTest: string): string => `
SELECT extract(epoch FROM now())::float8 AS clock, e.idem_key, e.state, e.fingerprint,
       e.status_code, e.response_headers, e.response_body, e.body_retained, e.body_size,
       (e.expires_at <= now() AND (e.state <> 'in_flight' OR e.locked_until <= now())) AS free,
       (e.state = 'in_flight' AND e.locked_until <= now()) AS lease_over,
       greatest(1, ceil(extract(epoch FROM (e.locked_until - now()))))::int AS retry_after_s,
       -- The remaining retention of a replayed row: the cache refills with it.
       greatest(0, floor(extract(epoch FROM (e.expires_at - now())) * 1000))::float8 AS ttl_left_ms
  FROM idempotency_keys e
 WHERE e.tenant_id = $1 AND ${keyTest}`;

/** One tenant's rows for a batch of keys: $1 tenant, $2 keys. */
export const foundStatement: Statement = {
  name: 'idem_claim_found_v1',
  text: foundText('e.idem_key = ANY($2::text[])'),
};

/** The same for exactly one key (a plain primary-key lookup): $1 tenant, $2 key. */
export const foundOneStatement: Statement = {
  name: 'idem_claim_found_one_v1',
  text: foundText('e.idem_key = $2'),
};

/** Parameters per inserted row, after $1 (clock) and $2 (tenant). */
export const INSERT_PARAMS_PER_ROW = 9;

const TAKEOVER = `DO UPDATE SET
  fingerprint      = EXCLUDED.fingerprint,
  state            = CASE WHEN k.expires_at > EXCLUDED.created_at AND k.on_expired_lease = 'fail'
                          THEN 'outcome_unknown' ELSE 'in_flight' END,
  owner_token      = CASE WHEN k.expires_at > EXCLUDED.created_at AND k.on_expired_lease = 'fail'
                          THEN k.owner_token ELSE EXCLUDED.owner_token END,
  attempt          = CASE WHEN k.expires_at <= EXCLUDED.created_at THEN 1 ELSE k.attempt + 1 END,
  on_expired_lease = CASE WHEN k.expires_at <= EXCLUDED.created_at THEN EXCLUDED.on_expired_lease ELSE k.on_expired_lease END,
  locked_until     = CASE WHEN k.expires_at > EXCLUDED.created_at AND k.on_expired_lease = 'fail'
                          THEN k.locked_until ELSE EXCLUDED.locked_until END,
  expires_at       = CASE WHEN k.expires_at <= EXCLUDED.created_at THEN EXCLUDED.expires_at ELSE k.expires_at END,
  created_at       = CASE WHEN k.expires_at <= EXCLUDED.created_at THEN EXCLUDED.created_at ELSE k.created_at END,
  completed_at     = NULL, status_code = NULL, response_headers = NULL,
  response_body    = NULL, body_retained = NULL, body_size = NULL,
  route = EXCLUDED.route, method = EXCLUDED.method, path = EXCLUDED.path
WHERE (k.expires_at <= EXCLUDED.created_at AND (k.state <> 'in_flight' OR k.locked_until <= EXCLUDED.created_at))
   OR (k.state = 'in_flight' AND k.locked_until <= EXCLUDED.created_at AND k.fingerprint = EXCLUDED.fingerprint)
`;

function insertText(rows: number, onConflict: string): string {
  const clock = `coalesce(to_timestamp($1::float8), now())`;
  const values: string[] = [];
  for (let r = 0; r < rows; r++) {
    const p = (i: number): string => `$${3 + r * INSERT_PARAMS_PER_ROW + i}`;
    values.push(`($2::text, ${p(0)}::text, decode(${p(1)}::text, 'hex'), 'in_flight', ${p(2)}::uuid, 1, ${p(5)}::text,
     ${clock} + ${p(3)}::float8 * interval '1 millisecond', ${clock} + ${p(4)}::float8 * interval '1 millisecond',
     ${clock}, ${p(6)}::text, ${p(7)}::text, ${p(8)}::text)`);
  }
  return `
INSERT INTO idempotency_keys AS k
  (tenant_id, idem_key, fingerprint, state, owner_token, attempt, on_expired_lease,
   locked_until, expires_at, created_at, route, method, path)
VALUES ${values.join(',\n       ')}
ON CONFLICT (tenant_id, idem_key) ${onConflict}
RETURNING k.idem_key, k.state, k.owner_token, k.attempt`;
}

const newStatements: Statement[] = [];
const takeoverStatements: Statement[] = [];

/**
 * The insert of `rows` new keys of one tenant (1.), or the takeover of
 * `rows` of its keys (3.). One text per batch size, built once per process
 * and prepared once per connection; the one-row statements are the lone
 * claim's (the usual case when the proxy is not busy).
 */
export function claimInsertStatement(rows: number, kind: 'new' | 'takeover' = 'new'): Statement {
  const cache = kind === 'new' ? newStatements : takeoverStatements;
  let s = cache[rows];
  if (s === undefined) {
    const name = rows === 1 ? `idem_claim_${kind}_one_v1` : `idem_claim_${kind}_v1_${rows}`;
    s = { name, text: insertText(rows, kind === 'new' ? 'DO NOTHING' : TAKEOVER) };
    cache[rows] = s;
  }
  return s;
}
