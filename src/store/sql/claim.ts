import type { Statement } from '../db/port.js';

// The claim of one tenant's keys, in single-tenant statements (every
// reference to the table filters on tenant_id = $1, so on Citus each runs on
// the one shard that holds the tenant; docs/scale.md):
//
// 1. claim: one call of idempotency_claim (migration 4, src/store/migrations/
//    004-claim-function.ts): it reads the keys' rows first (found), and
//    only for keys without a row inserts them (ON CONFLICT DO NOTHING),
//    reading again what that insert left alone (rows committed after the
//    first read). A duplicate is answered by one read that writes nothing
//    and takes no lock; a new key costs the read and the insert; both one
//    round trip. On Citus the call is sent whole to the worker that holds
//    the tenant's shard. A row settled for this request — complete or
//    outcome_unknown within its retention, in flight under a live lease,
//    or in flight under another fingerprint — is answered from it.
// 2. takeover, for the rest only: INSERT ... ON CONFLICT DO UPDATE ... WHERE
//    <takeover>, which takes over a row whose retention expired (unless it
//    is in flight under a live lease), takes over an in_flight row whose
//    lease ran out with the same fingerprint (on_expired_lease = reexecute)
//    or marks it outcome_unknown (= fail), or leaves it alone (a concurrent
//    claim changed it: the store claims again).
//
// One clock per row: the takeover compares times with the clock of the
// claim call that read the rows (passed as $1, epoch seconds to the
// microsecond). Every comparison inside the takeover reads
// EXCLUDED.created_at, the row's clock, never now() (Citus refuses STABLE
// functions in ON CONFLICT ... SET/WHERE, and evaluates a routed write's
// now() on the coordinator but a read's on the worker: one value read once
// keeps the tests of a row in agreement).
// Rows are inserted (and locked) in the order of the arrays or the VALUES
// list, which the store sorts by key, the order every statement of the store
// locks rows in: overlapping batches wait for each other but never deadlock.

/**
 * The claim of distinct keys of one tenant: $1 tenant, then arrays of keys,
 * fingerprints (hex), owner tokens, lease ms, ttl ms, on_expired_lease,
 * routes, methods, paths, in the order the store sorted them (by key).
 */
export const claimStatement: Statement = {
  name: 'idem_claim_v4',
  text: `SELECT * FROM idempotency_claim_v2($1::text, $2::text[], $3::text[], $4::uuid[], $5::float8[], $6::float8[],
                                  $7::text[], $8::text[], $9::text[], $10::text[])`,
};

/**
 * The claims of several tenants in one call (migration 5), for a batch that
 * mixes tenants on plain PostgreSQL: $1 the tenants, sorted; $2 the last
 * index (1-based) of each tenant's keys; then the arrays of the claim call,
 * tenant after tenant, each tenant's keys sorted. Each row comes back with
 * its tenant id first. Never on Citus: a statement there touches one tenant.
 */
export const claimTenantsStatement: Statement = {
  name: 'idem_claim_tenants_v2',
  text: `SELECT * FROM idempotency_claim_tenants_v2($1::text[], $2::int[], $3::text[], $4::text[], $5::uuid[], $6::float8[],
                                          $7::float8[], $8::text[], $9::text[], $10::text[], $11::text[])`,
};

/**
 * One key's claim as two statements, where a function call costs more than the
 * statements it runs (Citus: the call is planned on the node it reaches and
 * its statements again, as distributed queries, inside it; docs/scale.md).
 * Each is a single-table statement on one row that filters on the
 * distribution column, which Citus plans once and routes at execution:
 *
 * - loneReadStatement: the claim call's first read, for one key ($1 tenant,
 *   $2 key), with the same columns and the same clock. A row found is
 *   answered from as the call would (settled, or taken over).
 * - loneInsertStatement: no row: the call's lone insert, ON CONFLICT DO
 *   NOTHING ($1 tenant, $2 key, $3 fingerprint hex, $4 owner token, $5
 *   on_expired_lease, $6 lease ms, $7 ttl ms, $8 route, $9 method, $10
 *   path). Nothing inserted: a row committed since the read, and the store
 *   claims again (its read finds it).
 */
export const loneReadStatement: Statement = {
  name: 'idem_claim_read_v2',
  text: `
SELECT false AS inserted, extract(epoch FROM now())::float8 AS clock, idem_key, state, NULL::uuid AS owner_token,
       NULL::integer AS attempt, fingerprint, status_code, response_headers, response_body, body_retained, body_size,
       (expires_at <= now() AND (state <> 'in_flight' OR locked_until <= now())) AS free,
       (state = 'in_flight' AND locked_until <= now()) AS lease_over,
       greatest(1, ceil(extract(epoch FROM (locked_until - now()))))::integer AS retry_after_s,
       greatest(0, floor(extract(epoch FROM (expires_at - now())) * 1000))::float8 AS ttl_left_ms, trace_context
  FROM idempotency_keys
 WHERE tenant_id = $1 AND idem_key = $2`,
};

export const loneInsertStatement: Statement = {
  name: 'idem_claim_insert_v1',
  text: `
INSERT INTO idempotency_keys AS k
  (tenant_id, idem_key, fingerprint, state, owner_token, attempt, on_expired_lease,
   locked_until, expires_at, created_at, route, method, path)
VALUES ($1, $2, decode($3, 'hex'), 'in_flight', $4::uuid, 1, $5,
        now() + $6::float8 * interval '1 millisecond', now() + $7::float8 * interval '1 millisecond', now(), $8, $9, $10)
ON CONFLICT (tenant_id, idem_key) DO NOTHING
RETURNING true AS inserted, k.idem_key, k.state, k.owner_token, k.attempt`,
};

/** Parameters per row of a takeover, after $1 (clock) and $2 (tenant). */
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
  response_body    = NULL, body_retained = NULL, body_size = NULL, trace_context = NULL,
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

const takeoverStatements: Statement[] = [];

/**
 * The takeover of `rows` keys of one tenant (2.): $1 the claim call's clock,
 * $2 tenant, then INSERT_PARAMS_PER_ROW per row. One text per batch size,
 * built once per process and prepared once per connection.
 */
export function takeoverStatement(rows: number): Statement {
  let s = takeoverStatements[rows];
  if (s === undefined) {
    const name = rows === 1 ? 'idem_claim_takeover_one_v2' : `idem_claim_takeover_v2_${rows}`;
    s = { name, text: insertText(rows, TAKEOVER) };
    takeoverStatements[rows] = s;
  }
  return s;
}
