import type { Statement } from '../db/port.js';

// Only one instance sweeps at a time: the transaction-scoped advisory lock is
// released by the transaction's end.
export const sweepLockStatement: Statement = {
  name: 'idem_sweep_lock_v1',
  text: `SELECT pg_try_advisory_xact_lock($1::bigint) AS locked`,
};

// One bounded batch of expired candidates, oldest first: rows whose retention
// is over, except rows still in flight under a live lease (their upstream call
// outlasted the ttl; they expire once it settles). A plain read, no row
// locks: on Citus it is the one statement that reads every shard, and Citus
// runs no multi-shard FOR UPDATE (docs/scale.md).
export const sweepCandidatesStatement: Statement = {
  name: 'idem_sweep_candidates_v1',
  text: `SELECT tenant_id, idem_key FROM idempotency_keys
          WHERE expires_at <= now()
            AND (state <> 'in_flight' OR locked_until <= now())
          ORDER BY expires_at
          LIMIT $1`,
};

// Deletes one tenant's candidates by primary key, with the expiry test again
// under the row lock: a row taken over since the read (new retention) stays.
// SKIP LOCKED: the sweeper never waits on a row a claim holds, so it can take
// part in no deadlock. One tenant per statement: one shard on Citus.
export const sweepDeleteStatement: Statement = {
  name: 'idem_sweep_delete_v1',
  text: `DELETE FROM idempotency_keys
          WHERE tenant_id = $1 AND idem_key IN (
                SELECT idem_key FROM idempotency_keys
                 WHERE tenant_id = $1 AND idem_key = ANY($2::text[])
                   AND expires_at <= now()
                   AND (state <> 'in_flight' OR locked_until <= now())
                   FOR UPDATE SKIP LOCKED)
         RETURNING 1 AS deleted`,
};
