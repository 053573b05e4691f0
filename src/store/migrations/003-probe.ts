import type { Migration } from './index.js';

// Version 3: `onExpiredLease: probe` (docs/guarantees.md, Asking the
// upstream). A claim stores the route's onExpiredLease on its row, and the
// first migration's CHECK allowed only reexecute and fail. The constraint is
// replaced by one that also allows probe: its name is PostgreSQL's default
// for a column CHECK (table_column_check). Plain DDL that PostgreSQL, the
// embedded store (PGlite) and Citus (which propagates it to every shard of
// the distributed table) all run. NOT VALID: every existing row passed the
// old constraint, whose values are a subset of the new ones, so nothing needs
// checking, and the table is not scanned while the DDL holds its exclusive
// lock (on a large table that scan would stall every claim for its length);
// the constraint holds for every row written from now on.
//
// Shipped text: never edit it, add the next number.
export const probeLease: Migration = {
  version: 3,
  name: 'on_expired_lease_probe',
  sql: `
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_on_expired_lease_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_on_expired_lease_check
  CHECK (on_expired_lease IN ('reexecute', 'fail', 'probe')) NOT VALID;
`,
};
