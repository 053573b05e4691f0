import type { Statement } from '../db/port.js';

// The atomic claim, for a batch of distinct (tenant_id, idem_key) pairs in one
// statement and one commit. For each input row it either
//   - inserts a new in_flight row with a lease and the caller's owner token,
//   - takes over a row whose retention expired (the key is new again) —
//     unless it is in flight with a live lease: a key whose upstream call
//     outlasts its ttl is still in use, never free for a second execution,
//   - takes over an in_flight row whose lease ran out, same fingerprint
//     (on_expired_lease = reexecute), or marks it outcome_unknown (= fail),
//   - or leaves the row alone, and returns it as it stood (duplicate).
// A row the statement's snapshot already shows settled for this request —
// complete or outcome_unknown within its retention, in flight with a live
// lease, or in flight under another fingerprint — is answered from that
// snapshot and never enters the INSERT: a duplicate takes no row lock and
// writes nothing, so a batch of duplicates commits without a WAL flush (the
// answer is the one the INSERT path gave too: it also read these rows from
// the same snapshot). Anything else, including a snapshot row with a NULL
// the test cannot decide, goes through the INSERT ... ON CONFLICT.
// Rows are claimed (and locked) in (tenant_id, idem_key) order, as commits
// lock them: overlapping batches on any number of instances wait for each
// other but never deadlock. Every time comparison uses the database clock. One row comes back per input,
// in input order (ord). A row with neither claim nor existing columns vanished
// or is not yet visible: the caller claims again.
//
// Two statements share this text and differ only in where the input rows come
// from: arrays of a batch (unnest), or the ten scalar parameters of a lone
// claim as one row with ord 1. A lone claim is the common case whenever the
// proxy is not busy, and its plan joins the one input row by nested loops
// (no hash tables, no merge join): PostgreSQL starts and runs it sooner, and
// starting and running the statement is most of a claim's latency besides
// the fsync (docs/storage.md).
const claimText = (input: string): string => `
WITH input AS (${input}
), found AS (
  -- The rows as this statement's snapshot shows them, and whether the
  -- INSERT below would leave them alone (its ON CONFLICT ... WHERE, negated).
  SELECT i.ord, e.state, e.fingerprint, e.status_code, e.response_headers, e.response_body,
         e.body_retained, e.body_size, e.locked_until, e.expires_at,
         coalesce(NOT ((e.expires_at <= now() AND (e.state <> 'in_flight' OR e.locked_until <= now()))
                       OR (e.state = 'in_flight' AND e.locked_until <= now() AND e.fingerprint = decode(i.fp, 'hex'))),
                  false) AS settled
    FROM input i
    JOIN idempotency_keys e ON e.tenant_id = i.tenant_id AND e.idem_key = i.idem_key
), claimed AS (
  INSERT INTO idempotency_keys AS k
    (tenant_id, idem_key, fingerprint, state, owner_token, attempt, on_expired_lease,
     locked_until, expires_at, created_at, route, method, path)
  SELECT tenant_id, idem_key, decode(fp, 'hex'), 'in_flight', owner_token, 1, on_expired_lease,
         now() + lease_ms * interval '1 millisecond', now() + ttl_ms * interval '1 millisecond',
         now(), route, method, path
    FROM input i
   WHERE NOT EXISTS (SELECT 1 FROM found f WHERE f.ord = i.ord AND f.settled)
   ORDER BY tenant_id, idem_key -- one global lock order: concurrent batches never deadlock
  ON CONFLICT (tenant_id, idem_key) DO UPDATE SET
    fingerprint      = EXCLUDED.fingerprint,
    state            = CASE WHEN k.expires_at > now() AND k.on_expired_lease = 'fail'
                            THEN 'outcome_unknown' ELSE 'in_flight' END,
    owner_token      = CASE WHEN k.expires_at > now() AND k.on_expired_lease = 'fail'
                            THEN k.owner_token ELSE EXCLUDED.owner_token END,
    attempt          = CASE WHEN k.expires_at <= now() THEN 1 ELSE k.attempt + 1 END,
    on_expired_lease = CASE WHEN k.expires_at <= now() THEN EXCLUDED.on_expired_lease ELSE k.on_expired_lease END,
    locked_until     = CASE WHEN k.expires_at > now() AND k.on_expired_lease = 'fail'
                            THEN k.locked_until ELSE EXCLUDED.locked_until END,
    expires_at       = CASE WHEN k.expires_at <= now() THEN EXCLUDED.expires_at ELSE k.expires_at END,
    created_at       = CASE WHEN k.expires_at <= now() THEN now() ELSE k.created_at END,
    completed_at     = NULL, status_code = NULL, response_headers = NULL,
    response_body    = NULL, body_retained = NULL, body_size = NULL,
    route = EXCLUDED.route, method = EXCLUDED.method, path = EXCLUDED.path
  WHERE (k.expires_at <= now() AND (k.state <> 'in_flight' OR k.locked_until <= now()))
     OR (k.state = 'in_flight' AND k.locked_until <= now() AND k.fingerprint = EXCLUDED.fingerprint)
  RETURNING k.tenant_id, k.idem_key, k.state, k.owner_token, k.attempt
)
SELECT i.ord::int AS ord,
       (c.owner_token IS NOT NULL AND c.owner_token = i.owner_token AND c.state = 'in_flight') AS claimed,
       c.attempt AS claim_attempt,
       coalesce(c.state, e.state) AS state,
       e.fingerprint, e.status_code, e.response_headers, e.response_body, e.body_retained, e.body_size,
       greatest(1, ceil(extract(epoch FROM (e.locked_until - now()))))::int AS retry_after_s,
       -- The remaining retention of a replayed row: the cache refills with it.
       greatest(0, floor(extract(epoch FROM (e.expires_at - now())) * 1000))::float8 AS ttl_left_ms,
       -- An in-flight row with its lease over that this claim did not take
       -- over (same fingerprint) is this statement's older snapshot of a row
       -- a concurrent claim just took over or marked outcome_unknown: the
       -- caller claims again rather than answer from it.
       (e.state = 'in_flight' AND e.locked_until <= now()) AS lease_over
  FROM input i
  LEFT JOIN claimed c ON c.tenant_id = i.tenant_id AND c.idem_key = i.idem_key
  LEFT JOIN found e
         ON c.tenant_id IS NULL AND e.ord = i.ord
        AND (e.expires_at > now() OR (e.state = 'in_flight' AND e.locked_until > now()))
 ORDER BY i.ord`;

export const claimStatement: Statement = {
  name: 'idem_claim_v2',
  text: claimText(`
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::float8[], $6::float8[],
                       $7::text[], $8::text[], $9::text[], $10::text[])
    WITH ORDINALITY AS i(tenant_id, idem_key, fp, owner_token, lease_ms, ttl_ms,
                         on_expired_lease, route, method, path, ord)`),
};

/** The same claim for exactly one key: the parameters of claimStatement as scalars, in the same order. */
export const claimOneStatement: Statement = {
  name: 'idem_claim_one_v1',
  text: claimText(`
  SELECT $1::text AS tenant_id, $2::text AS idem_key, $3::text AS fp, $4::uuid AS owner_token,
         $5::float8 AS lease_ms, $6::float8 AS ttl_ms, $7::text AS on_expired_lease,
         $8::text AS route, $9::text AS method, $10::text AS path, 1::bigint AS ord`),
};
