import type { Statement } from '../db/port.js';

// An operator resolves an outcome_unknown key as not executed: the key is
// freed (the row removed), the next request with it runs the operation. Same
// condition as the executed resolution: only a key a request would find
// outcome_unknown.
export const resolveNotExecutedStatement: Statement = {
  name: 'idem_admin_resolve_not_executed_v1',
  text: `DELETE FROM idempotency_keys
          WHERE tenant_id = $1 AND idem_key = $2
            AND NOT (expires_at <= now() AND (state <> 'in_flight' OR locked_until <= now()))
            AND (state = 'outcome_unknown'
                 OR (state = 'in_flight' AND on_expired_lease = 'fail' AND locked_until <= now()))
      RETURNING state`,
};
