import type { Statement } from '../db/port.js';

// One bounded chunk of the key census behind the outcome-unknown and
// oldest-in-flight gauges (docs/operations.md, Metrics): at most $3 rows
// after the cursor ($1, $2), in primary-key order (an index range scan), so
// a tick costs the same on any table size; a pass over the table is the
// chunks from '' to the end. States as the admin listing counts them.
export const censusChunkStatement: Statement = {
  name: 'idem_admin_census_v1',
  text: `
WITH scan AS (
  SELECT tenant_id, idem_key, state, on_expired_lease, locked_until, expires_at, created_at
    FROM idempotency_keys
   WHERE (tenant_id, idem_key) > ($1::text, $2::text)
   ORDER BY tenant_id, idem_key
   LIMIT $3
), live AS (
  SELECT *, (state = 'outcome_unknown'
             OR (state = 'in_flight' AND on_expired_lease = 'fail' AND locked_until <= now())) AS unknown
    FROM scan
   WHERE NOT (expires_at <= now() AND (state <> 'in_flight' OR locked_until <= now()))
)
SELECT (SELECT count(*) FROM scan)::int AS scanned,
       (SELECT count(*) FROM live WHERE unknown)::int AS outcome_unknown,
       (SELECT extract(epoch FROM now() - min(created_at)) FROM live WHERE state = 'in_flight' AND NOT unknown)::float8
         AS oldest_in_flight_s,
       (SELECT s.tenant_id FROM scan s ORDER BY s.tenant_id DESC, s.idem_key DESC LIMIT 1) AS last_tenant,
       (SELECT s.idem_key FROM scan s ORDER BY s.tenant_id DESC, s.idem_key DESC LIMIT 1) AS last_key`,
};
