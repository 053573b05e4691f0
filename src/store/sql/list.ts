import type { Statement } from '../db/port.js';

// One page of the operators' key listing (docs/operations.md, Admin API),
// keyset-paged on the primary key: rows after the cursor, in primary-key
// order, never OFFSET. Each call examines at most $3 rows of the index range
// (the scan bound), then keeps those that pass the filters, at most $7: a
// selective filter on a huge table costs one bounded index range per page,
// never a table scan. The summary row says how many rows were examined and
// which was the last: the next page starts after it (or after the last hit,
// when the page filled). Without the filters' matches the page is empty but
// the listing goes on.
//
// state ($4) is the state a request would meet: an in-flight row whose lease
// ran out on a route with onExpiredLease = fail is outcome_unknown (the next
// claim marks it so); expired rows act as absent and are not listed.
// Parameters: $1/$2 cursor, $3 scan bound, $4 state, $5 route, $6 older than
// (ms, on created_at), $7 page size. Two statements share the text: across
// tenants (row comparison on (tenant_id, idem_key)) and within one tenant
// (tenant_id = $1, the primary key's prefix).
// The record's kind (docs/storage.md, Record kinds): a record without its
// body is a reference when its reserved reference entry is last, or last but
// the trace entry (src/proxy/headers.ts: records stored before migration 8,
// which moved the trace context to a column of its own); otherwise a marker.
const RECORD_KIND = `CASE WHEN body_retained IS NULL THEN NULL WHEN body_retained THEN 'full'
              WHEN response_headers -> -1 ->> 0 = 'idempotency-proxy-reference'
                OR (response_headers -> -1 ->> 0 = 'idempotency-proxy-trace' AND response_headers -> -2 ->> 0 = 'idempotency-proxy-reference')
              THEN 'reference' ELSE 'marker' END`;

const listText = (range: string): string => `
WITH scan AS (
  SELECT tenant_id, idem_key, state, attempt, on_expired_lease, locked_until, expires_at,
         created_at, completed_at, status_code, body_retained, body_size, route, method, path,
         CASE WHEN state = 'outcome_unknown'
                OR (state = 'in_flight' AND on_expired_lease = 'fail' AND locked_until <= now())
              THEN 'outcome_unknown' ELSE state END AS effective_state,
         (expires_at <= now() AND (state <> 'in_flight' OR locked_until <= now())) AS expired,
         (state = 'in_flight' AND locked_until <= now()) AS lease_expired,
         ${RECORD_KIND} AS record_kind
    FROM idempotency_keys
   WHERE ${range}
   LIMIT $3
), hits AS (
  SELECT * FROM scan
   WHERE NOT expired
     AND ($4::text IS NULL OR effective_state = $4::text)
     AND ($5::text IS NULL OR route = $5::text)
     AND ($6::float8 IS NULL OR created_at <= now() - $6::float8 * interval '1 millisecond')
   ORDER BY tenant_id, idem_key
   LIMIT $7
), summary AS (
  SELECT count(*)::int AS scanned,
         (SELECT s.tenant_id FROM scan s ORDER BY s.tenant_id DESC, s.idem_key DESC LIMIT 1) AS last_tenant,
         (SELECT s.idem_key FROM scan s ORDER BY s.tenant_id DESC, s.idem_key DESC LIMIT 1) AS last_key
    FROM scan
)
SELECT m.scanned, m.last_tenant, m.last_key, h.*
  FROM summary m LEFT JOIN hits h ON true
 ORDER BY h.tenant_id, h.idem_key`;

export const listStatement: Statement = {
  name: 'idem_admin_list_v2',
  text: listText(`(tenant_id, idem_key) > ($1::text, $2::text)
   ORDER BY tenant_id, idem_key`),
};

/** The same page within one tenant: $1 is the tenant id, $2 the last key (or ''). */
export const listTenantStatement: Statement = {
  name: 'idem_admin_list_tenant_v2',
  text: listText(`tenant_id = $1::text AND idem_key > $2::text
   ORDER BY tenant_id, idem_key`),
};
