import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db } from '../../src/store/db/port.js';
import { migrate } from '../../src/store/migrate.js';
import { latestVersion } from '../../src/store/migrations/index.js';
import { citusNodes } from '../helpers/citus.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { KeyStore } from '../../src/store/key-store.js';
import { randomUUID } from 'node:crypto';

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

// Migration 8 on a table already in use (and, on Citus, already distributed):
// the database is taken back to version 7 — its column and functions dropped,
// its record removed — with a record stored the old way, then migrated again.
describe(`migration 8 on a database at version 7 with records${citusNodes === null ? '' : ', on Citus'}`, () => {
  let t: TestDatabase;
  let db: Db;
  before(async () => {
    t = await createTestDatabase({ migrated: false });
    db = createPgDb({ connectionString: t.url, max: 2 });
  });
  after(async () => {
    await db?.close();
    await t?.drop();
  });

  test('applies the column and the functions, distributes the new claim function on Citus, and keeps the records', async () => {
    await migrate(db);
    for (const back of ['DROP FUNCTION idempotency_claim_tenants_v2', 'DROP FUNCTION idempotency_claim_v2',
      'ALTER TABLE idempotency_keys DROP COLUMN trace_context', 'DELETE FROM idempotency_schema_migrations WHERE version = 8']) await sql(t.url, back);
    await sql(t.url, `INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, state, expires_at, completed_at, status_code,
                                                    response_headers, response_body, body_retained, body_size)
                      VALUES ('t', 'before-8', '\\x07'::bytea, 'complete', now() + interval '1 hour', now(), 200,
                              '[["content-type","text/plain"],["idempotency-proxy-trace","00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]]',
                              '\\x6f6b'::bytea, true, 2)`);
    const r = await migrate(db);
    assert.deepEqual(r.applied.map((m) => m.version), [8]);
    assert.deepEqual(r.distributed, citusNodes === null ? [] : ['idempotency_claim_v2()']);
    const store = new KeyStore(db);
    const old = await store.claim({ tenantId: 't', key: 'before-8', fingerprint: Buffer.from([7]), ownerToken: randomUUID(), leaseMs: 60_000,
      ttlMs: 3_600_000, onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/p' });
    assert.equal(old.kind, 'complete', JSON.stringify(old));
    if (old.kind === 'complete') {
      assert.equal(old.response.body.toString(), 'ok');
      assert.equal(old.response.trace, null);
      assert.equal(old.response.headers.at(-1)![0], 'idempotency-proxy-trace');
    }
    const c = { tenantId: 't', key: 'after-8', fingerprint: Buffer.from([8]), ownerToken: randomUUID(), leaseMs: 60_000,
      ttlMs: 3_600_000, onExpiredLease: 'reexecute' as const, route: 'r', method: 'POST', path: '/p' };
    assert.equal((await store.claim(c)).kind, 'claimed');
    const tp = '00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01';
    await store.commit({ tenantId: 't', key: 'after-8', ownerToken: c.ownerToken, response: { status: 201, headers: [], body: Buffer.alloc(0), bodyRetained: true, bodySize: 0, trace: tp } });
    const again = await store.claim({ ...c, ownerToken: randomUUID() });
    assert.equal(again.kind === 'complete' ? again.response.trace : again.kind, tp);
  });
});
