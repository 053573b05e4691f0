import type { Statement } from '../db/port.js';

// An operator resolves an outcome_unknown key as executed: the row becomes a
// complete record whose stored answer (built by src/admin/resolution.ts) says
// the operation ran and its response was not recorded. Only a key a request
// would find outcome_unknown: stored so, or in flight with its lease run out
// on an onExpiredLease = fail route, and not expired. The owner token is
// cleared, so a holder that was only stalled is fenced out of its commit.
export const resolveExecutedStatement: Statement = {
  name: 'idem_admin_resolve_executed_v2',
  text: `UPDATE idempotency_keys
            SET state = 'complete', status_code = $3, response_headers = $4::jsonb,
                response_body = decode($5, 'hex'), body_retained = true, body_size = $6, trace_context = NULL,
                completed_at = now(), locked_until = NULL, owner_token = NULL
          WHERE tenant_id = $1 AND idem_key = $2
            AND NOT (expires_at <= now() AND (state <> 'in_flight' OR locked_until <= now()))
            AND (state = 'outcome_unknown'
                 OR (state = 'in_flight' AND on_expired_lease = 'fail' AND locked_until <= now()))
      RETURNING state`,
};
