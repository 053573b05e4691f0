import type { Statement } from '../db/port.js';

// The operator's escape hatch: removes one record whatever its state.
export const purgeStatement: Statement = {
  name: 'idem_purge_v1',
  text: `DELETE FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2 RETURNING state`,
};
