import type { Statement } from '../db/port.js';

// Completes claimed rows of one tenant with their stored responses, fenced
// by the owner token: a proxy whose lease was taken over writes nothing and
// gets no row back. One row comes back per row committed, with its remaining
// retention (for the cache), computed from the row's own completed_at: one
// clock for the row, and no STABLE function in RETURNING (Citus refuses
// them; docs/scale.md).
// Only rows still in flight are written. A row already complete under the
// same owner token was completed for this very claim (tokens are fresh per
// claim): by the upstream, in its own transaction (idempotency_settle,
// docs/co-commit.md), or by this commit retried after its reply was lost. It
// is reported committed (kept = true) and not written: the record that
// stands is the one already there. The row lock (FOR UPDATE) returns the
// row's latest version, so a settle committed while this statement waited
// for the lock is seen as complete, and kept.
// Every reference to the table filters on tenant_id = $1: on Citus the
// statement runs on the tenant's shard alone.

const SET = (status: string, headers: string, body: string, retained: string, size: string, trace: string): string =>
  `state = 'complete', status_code = ${status}, response_headers = ${headers}::jsonb,
         response_body = decode(${body}, 'hex'), body_retained = ${retained}, body_size = ${size},
         trace_context = ${trace}, completed_at = now(), locked_until = NULL`;
const TTL_LEFT = (row: string): string =>
  `greatest(0, floor(extract(epoch FROM (${row}.expires_at - ${row}.completed_at)) * 1000))::float8`;

/** The batch commits' write of the locked rows still in flight (commitStatement says why an upsert). */
const UPSERT = (tenant: string): string => `INSERT INTO idempotency_keys AS k
    (tenant_id, idem_key, fingerprint, state, owner_token, expires_at, completed_at,
     status_code, response_headers, response_body, body_retained, body_size, trace_context)
  SELECT ${tenant}, l.idem_key, l.fingerprint, 'complete', l.owner_token, l.expires_at, now(),
         l.status_code, l.headers::jsonb, decode(l.body, 'hex'), l.retained, l.size, l.trace
    FROM locked l WHERE l.state = 'in_flight' ORDER BY l.ord
  ON CONFLICT (tenant_id, idem_key) DO UPDATE
     SET state = 'complete', status_code = EXCLUDED.status_code, response_headers = EXCLUDED.response_headers,
         response_body = EXCLUDED.response_body, body_retained = EXCLUDED.body_retained,
         body_size = EXCLUDED.body_size, trace_context = EXCLUDED.trace_context,
         completed_at = EXCLUDED.completed_at, locked_until = NULL
   WHERE k.owner_token = EXCLUDED.owner_token AND k.state = 'in_flight'`;

/** The written rows (kept = false), then the locked rows already complete (kept = true). */
const RESULT = `
SELECT idem_key, false AS kept, ttl_left_ms FROM written
UNION ALL
SELECT idem_key, true, ${TTL_LEFT('l')} FROM locked l WHERE state = 'complete'`;

/**
 * A batch of one tenant: $1 tenant, then arrays of keys, tokens, statuses,
 * headers, bodies (hex), retained, sizes, trace contexts (null where none:
 * migration 8), in the order the store sorted them (by key).
 *
 * Every row is reached by its primary key alone, whatever the planner
 * believes about the table. A join of the batch with the table leaves the
 * plan to the statistics, and a plan cached while the table had none (a new
 * deployment before autovacuum's first ANALYZE with rows) scanned the
 * tenant's whole range of the primary key for each batch: commits, and new
 * keys per second with them, slowed down as the table grew (migration 7
 * says the same of the claim). So:
 *
 * - locked: each input row looks its row up in a LATERAL subquery (both key
 *   columns equal to scalars: a unique probe) and locks it there (FOR UPDATE
 *   keeps the subquery from being merged into a join). The input is
 *   walked in its order, so rows are locked in key order, the order claims
 *   lock them in: concurrent batches never deadlock. Each locked row carries
 *   its input along.
 * - written: the locked rows still in flight are written by INSERT … ON
 *   CONFLICT DO UPDATE, whose conflict check is itself one probe of the
 *   primary key per row. The row always exists (it is locked by this
 *   statement), so nothing is inserted: the update is guarded by the owner
 *   token and the state, as a plain UPDATE would be, and it writes the row's
 *   latest version (which ON CONFLICT locks and reads whatever the
 *   statement's snapshot). Its values come through EXCLUDED: no function in
 *   the SET list (Citus refuses a STABLE one there).
 */
export const commitStatement: Statement = {
  name: 'idem_commit_v6',
  text: `
WITH i AS (
  SELECT * FROM unnest($2::text[], $3::uuid[], $4::int[], $5::text[], $6::text[], $7::bool[], $8::bigint[], $9::text[])
    WITH ORDINALITY AS i(idem_key, owner_token, status_code, headers, body, retained, size, trace, ord)
), locked AS (
  SELECT e.idem_key, e.state, e.fingerprint, e.expires_at, e.completed_at,
         i.owner_token, i.status_code, i.headers, i.body, i.retained, i.size, i.trace, i.ord
    FROM i CROSS JOIN LATERAL (
      SELECT x.idem_key, x.state, x.fingerprint, x.expires_at, x.completed_at
        FROM idempotency_keys x
       WHERE x.tenant_id = $1 AND x.idem_key = i.idem_key
         AND x.owner_token = i.owner_token AND x.state IN ('in_flight', 'complete')
         FOR UPDATE) e
), written AS (
  ${UPSERT('$1')}
  RETURNING k.idem_key, ${TTL_LEFT('k')} AS ttl_left_ms
)${RESULT}`,
};

/**
 * The commit of several tenants' rows in one statement, for a batch that
 * mixes tenants on plain PostgreSQL: $1 tenants, $2 keys, then the arrays of
 * commitStatement, sorted by tenant, then key (the order claims lock rows
 * in), reached the same way. Each row comes back with its tenant id. Never
 * on Citus: a statement there touches one tenant.
 */
export const commitTenantsStatement: Statement = {
  name: 'idem_commit_tenants_v3',
  text: `
WITH i AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::int[], $5::text[], $6::text[], $7::bool[], $8::bigint[], $9::text[])
    WITH ORDINALITY AS i(tenant_id, idem_key, owner_token, status_code, headers, body, retained, size, trace, ord)
), locked AS (
  SELECT e.tenant_id, e.idem_key, e.state, e.fingerprint, e.expires_at, e.completed_at,
         i.owner_token, i.status_code, i.headers, i.body, i.retained, i.size, i.trace, i.ord
    FROM i CROSS JOIN LATERAL (
      SELECT x.tenant_id, x.idem_key, x.state, x.fingerprint, x.expires_at, x.completed_at
        FROM idempotency_keys x
       WHERE x.tenant_id = i.tenant_id AND x.idem_key = i.idem_key
         AND x.owner_token = i.owner_token AND x.state IN ('in_flight', 'complete')
         FOR UPDATE) e
), written AS (
  ${UPSERT('l.tenant_id')}
  RETURNING k.tenant_id, k.idem_key, ${TTL_LEFT('k')} AS ttl_left_ms
)
SELECT tenant_id, idem_key, false AS kept, ttl_left_ms FROM written
UNION ALL
SELECT tenant_id, idem_key, true, ${TTL_LEFT('l')} FROM locked l WHERE state = 'complete'`,
};

/**
 * The same commit for exactly one key: $1 tenant, $2 key, then the scalars in the same order.
 * One UPDATE of one row by its primary key, guarded by owner token and state: a single-table
 * statement that filters on the distribution column, which Citus plans on its fast path. The
 * row's latest version is what the guard is tested on (an UPDATE that waited for the row lock
 * re-reads it). No row back: it was not in flight under this token — commitOneKeptStatement
 * tells whether it is already complete under it (kept).
 */
export const commitOneStatement: Statement = {
  name: 'idem_commit_one_v6',
  text: `
UPDATE idempotency_keys
   SET ${SET('$4::int', '$5::text', '$6::text', '$7::bool', '$8::bigint', '$9::text')}
 WHERE tenant_id = $1 AND idem_key = $2 AND owner_token = $3::uuid AND state = 'in_flight'
RETURNING idem_key, false AS kept, ${TTL_LEFT('idempotency_keys')} AS ttl_left_ms`,
};

/** After a lone commit that wrote nothing: the row, if it is complete under the same token (kept). */
export const commitOneKeptStatement: Statement = {
  name: 'idem_commit_one_kept_v1',
  text: `
SELECT idem_key, true AS kept, ${TTL_LEFT('idempotency_keys')} AS ttl_left_ms FROM idempotency_keys
 WHERE tenant_id = $1 AND idem_key = $2 AND owner_token = $3::uuid AND state = 'complete'`,
};
