import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db } from '../../src/store/db/port.js';
import { migrate } from '../../src/store/migrate.js';
import { latestVersion } from '../../src/store/migrations/index.js';
import { citusNodes } from '../helpers/citus.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';

// Two instances starting at once on a fresh database: one migrates, the
// other waits on the advisory lock and finds nothing to do. On Citus
// (`npm run test:citus`) the one that migrates also distributes the key
// table by tenant and makes the migrations table a reference table, once.

describe(`migrate, two instances at once${citusNodes === null ? '' : ', on Citus'}`, () => {
  let t: TestDatabase;
  let dbs: Db[];
  before(async () => {
    t = await createTestDatabase({ migrated: false });
    dbs = [0, 1].map(() => createPgDb({ connectionString: t.url, max: 1 }));
  });
  after(async () => {
    await Promise.all((dbs ?? []).map((db) => db.close()));
    await t?.drop();
  });

  test('one applies the migrations (and distributes on Citus), the other finds them applied; again, nothing', async () => {
    const results = await Promise.all(dbs.map((db) => migrate(db)));
    assert.deepEqual(results.map((r) => r.applied.length).sort(), [0, latestVersion]);
    const distributed = results.flatMap((r) => r.distributed).sort();
    const kinds = citusNodes === null
      ? []
      : await sql<{ name: string; kind: string }>(t.url, `SELECT table_name::text AS name, citus_table_type AS kind FROM citus_tables ORDER BY 1`);
    if (citusNodes === null) {
      assert.deepEqual(distributed, []);
    } else {
      assert.deepEqual(distributed, ['idempotency_claim()', 'idempotency_claim_v2()', 'idempotency_keys', 'idempotency_schema_migrations']);
      // The claim functions (migration 4's, kept for a rolling upgrade, and migration 8's) are distributed by
      // their tenant, colocated with the key table (one hop per call).
      const fns = await sql<{ fn: string; arg: number; colocated: boolean }>(t.url, `SELECT o.objid::regproc::text AS fn, o.distribution_argument_index AS arg,
          o.colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'idempotency_keys'::regclass) AS colocated
        FROM pg_dist_object o WHERE o.objid IN ('idempotency_claim'::regproc, 'idempotency_claim_v2'::regproc) ORDER BY 1`);
      assert.deepEqual(fns, [{ fn: 'idempotency_claim', arg: 0, colocated: true }, { fn: 'idempotency_claim_v2', arg: 0, colocated: true }]);
      assert.deepEqual(kinds, [
        { name: 'idempotency_keys', kind: 'distributed' },
        { name: 'idempotency_schema_migrations', kind: 'reference' },
      ]);
    }
    const again = await migrate(dbs[0]!);
    assert.deepEqual([again.applied.length, again.distributed.length], [0, 0]);
  });
});
