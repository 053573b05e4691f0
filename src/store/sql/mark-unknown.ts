import type { Statement } from '../db/port.js';

// The outcome probe (onExpiredLease: probe) could not tell whether the
// operation ran: the claimed row becomes outcome_unknown, as a takeover on an
// onExpiredLease = fail route makes it, so every retry gets 409 until an
// operator resolves it (keys resolve) or its retention ends. Fenced by the
// owner token; the owner token stays, as the fail takeover keeps it. One
// tenant's row by primary key: one shard on Citus.
export const markUnknownStatement: Statement = {
  name: 'idem_mark_unknown_v1',
  text: `UPDATE idempotency_keys SET state = 'outcome_unknown', locked_until = NULL
          WHERE tenant_id = $1 AND idem_key = $2 AND owner_token = $3::uuid AND state = 'in_flight'
         RETURNING 1 AS ok`,
};
