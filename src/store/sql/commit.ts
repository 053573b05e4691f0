import type { Statement } from '../db/port.js';

// Completes a batch of claimed rows with their stored responses, fenced by
// the owner token: a proxy whose lease was taken over writes nothing. One row
// comes back per row written, with its remaining retention (for the cache).
// A row already complete under the same owner token was completed for this
// very claim (tokens are fresh per claim): by the upstream, in its own
// transaction (idempotency_settle, docs/co-commit.md), or by this commit
// retried after its reply was lost. It is reported committed (kept = true)
// and not written: the record that stands is the one already there.
// Rows are locked in (tenant_id, idem_key) order before the update, the order
// the claim statement uses: concurrent batches never deadlock.
// As with the claim, a lone commit has a statement of its own with the same
// text around scalar parameters (a smaller plan, started and run faster).
const commitText = (input: string): string => `
WITH v AS (${input}
), locked AS (
  -- Row locks in (tenant_id, idem_key) order, the order claims take them in.
  -- Each locked row carries its input along, so the UPDATE joins only this:
  -- joined to v again, the update compared every row with every input row
  -- (a nested loop, n² for a batch of n: 16 ms for 128 rows against 7).
  SELECT k.tenant_id, k.idem_key, k.state, k.expires_at,
         v.owner_token, v.status_code, v.headers, v.body, v.retained, v.size
    FROM idempotency_keys k JOIN v ON k.tenant_id = v.tenant_id AND k.idem_key = v.idem_key
   WHERE k.owner_token = v.owner_token AND k.state IN ('in_flight', 'complete')
   ORDER BY k.tenant_id, k.idem_key
     FOR UPDATE OF k
), written AS (
  UPDATE idempotency_keys AS k
     SET state = 'complete', status_code = l.status_code, response_headers = l.headers::jsonb,
         response_body = decode(l.body, 'hex'), body_retained = l.retained, body_size = l.size,
         completed_at = now(), locked_until = NULL
    FROM locked l
   WHERE k.tenant_id = l.tenant_id AND k.idem_key = l.idem_key
     AND k.owner_token = l.owner_token AND k.state = 'in_flight'
  RETURNING k.tenant_id, k.idem_key, k.expires_at
)
SELECT r.tenant_id, r.idem_key, r.kept,
       greatest(0, floor(extract(epoch FROM (r.expires_at - now())) * 1000))::float8 AS ttl_left_ms
  FROM (SELECT tenant_id, idem_key, expires_at, false AS kept FROM written
        UNION ALL
        SELECT tenant_id, idem_key, expires_at, true FROM locked WHERE state = 'complete') r`;

export const commitStatement: Statement = {
  name: 'idem_commit_v3',
  text: commitText(`
  SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::int[], $5::text[], $6::text[], $7::bool[], $8::bigint[])
       AS v(tenant_id, idem_key, owner_token, status_code, headers, body, retained, size)`),
};

/** The same commit for exactly one key: the parameters of commitStatement as scalars, in the same order. */
export const commitOneStatement: Statement = {
  name: 'idem_commit_one_v3',
  text: commitText(`
  SELECT $1::text AS tenant_id, $2::text AS idem_key, $3::uuid AS owner_token, $4::int AS status_code,
         $5::text AS headers, $6::text AS body, $7::bool AS retained, $8::bigint AS size`),
};
