import type { Statement } from '../db/port.js';

// Whether any record is stored under a tenant id: one probe of the primary
// key's prefix (the admin API's "no such tenant" answer).
export const tenantExistsStatement: Statement = {
  name: 'idem_admin_tenant_exists_v1',
  text: `SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE tenant_id = $1) AS found`,
};
