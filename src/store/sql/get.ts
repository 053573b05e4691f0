import type { Statement } from '../db/port.js';

// One record, as an operator or a waiting duplicate sees it. Expired rows are
// reported with expired = true (they act as absent for requests).
export const getStatement: Statement = {
  name: 'idem_get_v2',
  text: `SELECT tenant_id, idem_key, state, attempt, on_expired_lease, fingerprint,
                locked_until, expires_at, created_at, completed_at,
                status_code, response_headers, body_retained, body_size, route, method, path, trace_context,
                CASE WHEN $3::bool THEN response_body END AS response_body,
                (expires_at <= now() AND (state <> 'in_flight' OR locked_until <= now())) AS expired,
                (state = 'in_flight' AND locked_until <= now()) AS lease_expired,
                greatest(1, ceil(extract(epoch FROM (locked_until - now()))))::int AS retry_after_s
           FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2`,
};
