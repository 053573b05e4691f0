import type { Migration } from './index.js';

// Version 3: `onExpiredLease: probe` (docs/guarantees.md, Asking the
// upstream). A claim stores the route's onExpiredLease on its row, and the
// first migration's CHECK allowed only reexecute and fail. The constraint is
// replaced by one that also allows probe: its name is PostgreSQL's default
// for a column CHECK (table_column_check). Plain DDL that PostgreSQL, the
// embedded store (PGlite) and Citus (which propagates it to every shard of
// the distributed table) all run. Adding the constraint scans the table once
// under the migration's lock; every existing row passes (the old values are
// a subset of the new ones).
//
// Shipped text: never edit it, add the next number.
export const probeLease: Migration = {
  version: 3,
  name: 'on_expired_lease_probe',
  sql: `
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_on_expired_lease_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_on_expired_lease_check
  CHECK (on_expired_lease IN ('reexecute', 'fail', 'probe'));
`,
};
