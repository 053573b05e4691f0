import type { Migration } from './index.js';

// Version 6: the planner may never count on a tenant being small.
//
// Every statement of the request path finds rows by (tenant_id, idem_key),
// mostly for a set of keys (idem_key = ANY(...), or a join with the batch),
// and runs as a generic plan (src/store/db/pg.ts), which cannot know which
// tenant it will be given. Once the statistics see many tenants (keyScope:
// tenantAndPath makes every request path one; a SaaS has thousands of
// merchants), a generic plan estimates one row per tenant and probes the
// primary key by tenant_id alone, filtering idem_key: every claim of a large
// tenant then reads all of that tenant's rows. Seen on 2026-12-02 in the
// benchmark: after 20 000 rows of one-row tenants beside 5 000 rows of the
// bench tenant, a replay's read went from 4 buffers to 1 064 (0.02 to 2.1 ms)
// and replays from PostgreSQL fell to a third. With n_distinct = 1 the
// planner assumes one tenant holds the whole table, and every statement
// probes the index by tenant and key, whatever the tenants.
//
// SET (n_distinct) takes effect at the table's next ANALYZE, run here (it
// samples a bounded number of rows and blocks no reads or writes).
//
// Shipped text: never edit it, add the next number.
export const tenantStatistics: Migration = {
  version: 6,
  name: 'tenant_statistics',
  sql: `
ALTER TABLE idempotency_keys ALTER COLUMN tenant_id SET (n_distinct = 1);
ANALYZE idempotency_keys;
`,
};
