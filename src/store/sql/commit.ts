import type { Statement } from '../db/port.js';

// Completes claimed rows of one tenant with their stored responses, fenced
// by the owner token: a proxy whose lease was taken over writes nothing. One
// row comes back per row written, with its remaining retention (for the
// cache), computed from the row's own completed_at: one clock for the row,
// and no STABLE function in RETURNING (Citus refuses them; docs/scale.md).
// A row already complete under the same owner token was completed by this
// very request (tokens are fresh per claim): a commit retried after its reply
// was lost. It is written again, identically, and reported committed.
// Every reference to the table filters on tenant_id = $1: on Citus the
// statement runs on the tenant's shard alone.

const set = (status: string, headers: string, body: string, retained: string, size: string): string =>
  `state = 'complete', status_code = ${status}, response_headers = ${headers}::jsonb,
       response_body = decode(${body}, 'hex'), body_retained = ${retained}, body_size = ${size},
       completed_at = now(), locked_until = NULL`;
const RETURNING = `RETURNING k.idem_key,
          greatest(0, floor(extract(epoch FROM (k.expires_at - k.completed_at)) * 1000))::float8 AS ttl_left_ms`;

/**
 * A batch of one tenant: $1 tenant, then arrays of keys, tokens, statuses,
 * headers, bodies (hex), retained, sizes, in the order the store sorted them
 * (by key). Rows are locked in that order before the update, the order
 * claims lock them in: concurrent batches never deadlock. Each locked row
 * carries its input along, so the UPDATE joins only this: joined to the input
 * again, the update compared every row with every input row (a nested loop,
 * n² for a batch of n: 16 ms for 128 rows against 7).
 */
export const commitStatement: Statement = {
  name: 'idem_commit_v3',
  text: `
WITH i AS (
  SELECT * FROM unnest($2::text[], $3::uuid[], $4::int[], $5::text[], $6::text[], $7::bool[], $8::bigint[])
    WITH ORDINALITY AS i(idem_key, owner_token, status_code, headers, body, retained, size, ord)
), v AS (
  SELECT e.idem_key, i.owner_token, i.status_code, i.headers, i.body, i.retained, i.size
    FROM idempotency_keys e JOIN i ON e.idem_key = i.idem_key
   WHERE e.tenant_id = $1 AND e.owner_token = i.owner_token AND e.state IN ('in_flight', 'complete')
   ORDER BY i.ord
     FOR UPDATE OF e
)
UPDATE idempotency_keys AS k
   SET ${set('v.status_code', 'v.headers', 'v.body', 'v.retained', 'v.size')}
  FROM v
 WHERE k.tenant_id = $1 AND k.idem_key = v.idem_key
   AND k.owner_token = v.owner_token AND k.state IN ('in_flight', 'complete')
${RETURNING}`,
};

/** The same commit for exactly one key (a primary-key update): $1 tenant, $2 key, then the scalars in the same order. */
export const commitOneStatement: Statement = {
  name: 'idem_commit_one_v3',
  text: `
UPDATE idempotency_keys AS k
   SET ${set('$4::int', '$5::text', '$6::text', '$7::bool', '$8::bigint')}
 WHERE k.tenant_id = $1 AND k.idem_key = $2
   AND k.owner_token = $3::uuid AND k.state IN ('in_flight', 'complete')
${RETURNING}`,
};
