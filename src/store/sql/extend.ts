import type { Statement } from '../db/port.js';

// Lease heartbeat for a slow upstream call. Zero rows back: the lease is lost.
export const extendStatement: Statement = {
  name: 'idem_extend_v1',
  text: `UPDATE idempotency_keys SET locked_until = now() + $4::float8 * interval '1 millisecond'
          WHERE tenant_id = $1 AND idem_key = $2 AND owner_token = $3::uuid AND state = 'in_flight'
         RETURNING 1 AS ok`,
};
