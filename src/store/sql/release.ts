import type { Statement } from '../db/port.js';

// Gives a key back (the request never reached the upstream's handler): the
// retry runs again. Fenced by the owner token.
export const releaseStatement: Statement = {
  name: 'idem_release_v1',
  text: `DELETE FROM idempotency_keys
          WHERE tenant_id = $1 AND idem_key = $2 AND owner_token = $3::uuid AND state = 'in_flight'`,
};
