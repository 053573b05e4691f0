import type { Statement } from '../db/port.js';

// One bounded batch of expired step markers (idempotency_step,
// docs/chain.md), oldest first, skipping markers a worker's transaction is
// renewing right now. Run by the sweeper after the keys, under the same
// advisory lock.
export const sweepStepsBatchStatement: Statement = {
  name: 'idem_sweep_steps_v1',
  text: `DELETE FROM idempotency_steps
          WHERE ctid = ANY (ARRAY(
                SELECT ctid FROM idempotency_steps
                 WHERE expires_at <= now()
                 ORDER BY expires_at
                 LIMIT $1
                   FOR UPDATE SKIP LOCKED))
         RETURNING 1 AS deleted`,
};
