import type { Statement } from '../db/port.js';

// A claim whose reply was lost: the store failed after the statement was sent,
// so it may have claimed the key for a request that was then answered without
// running anything (src/lifecycle/phases/claim.ts). The key is given back as
// the claim found it. Fenced by the owner token and the in_flight state: a
// claim that never took effect, or one taken over since, matches nothing.
// Two statements, each one row by primary key (one shard on Citus):

/** A key the claim inserted, or found past its retention (attempt 1): deleted, as a release does. */
export const abandonFreshStatement: Statement = {
  name: 'idem_abandon_fresh_v1',
  text: `DELETE FROM idempotency_keys
          WHERE tenant_id = $1 AND idem_key = $2 AND owner_token = $3::uuid AND state = 'in_flight' AND attempt = 1
         RETURNING 1 AS ok`,
};

/**
 * A key the claim took over from an expired lease (attempt 2 and more): its lease ends again, so the next claim
 * takes it over under the route's onExpiredLease (runs it again, or probes first), as it would have without
 * this claim. Never deleted: a probe route must still ask the upstream what the earlier attempt did.
 */
export const abandonTakeoverStatement: Statement = {
  name: 'idem_abandon_takeover_v1',
  text: `UPDATE idempotency_keys SET locked_until = now()
          WHERE tenant_id = $1 AND idem_key = $2 AND owner_token = $3::uuid AND state = 'in_flight' AND attempt > 1
         RETURNING 1 AS ok`,
};
