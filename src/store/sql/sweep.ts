import type { Statement } from '../db/port.js';

// Only one instance sweeps at a time: the transaction-scoped advisory lock is
// released by the transaction's end.
export const sweepLockStatement: Statement = {
  name: 'idem_sweep_lock_v1',
  text: `SELECT pg_try_advisory_xact_lock($1::bigint) AS locked`,
};

// One bounded batch of expired rows, oldest first, skipping rows a claim is
// taking over right now, and rows still in flight under a live lease (their
// upstream call outlasted the ttl; they expire once it settles).
export const sweepBatchStatement: Statement = {
  name: 'idem_sweep_batch_v1',
  text: `DELETE FROM idempotency_keys
          WHERE ctid = ANY (ARRAY(
                SELECT ctid FROM idempotency_keys
                 WHERE expires_at <= now()
                   AND (state <> 'in_flight' OR locked_until <= now())
                 ORDER BY expires_at
                 LIMIT $1
                   FOR UPDATE SKIP LOCKED))
         RETURNING 1 AS deleted`,
};
