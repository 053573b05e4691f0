import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db } from '../../src/store/db/port.js';
import { KeyStore } from '../../src/store/key-store.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

// Found by bench/soak.ts: on a database that starts empty, PostgreSQL's
// cached generic plan for the claim and commit statements (chosen after five
// executions, while the table is small) joins the batch by a sequential scan
// of the whole table, so every claim gets slower as the table grows —
// throughput halved within a minute. The proxy's connections plan every
// execution for its own parameters instead (plan_cache_mode).

describe('prepared statements never run a generic plan cached on a small table', () => {
  let t: TestDatabase;
  let db: Db;
  before(async () => {
    t = await createTestDatabase();
    db = createPgDb({ connectionString: t.url, max: 1 }); // one session: its plan cache is the one inspected
  });
  after(async () => {
    await db?.close();
    await t?.drop();
  });

  test('after many claims and commits on a fresh table, no statement has used a generic plan', async () => {
    const store = new KeyStore(db, { maxInFlight: 1 });
    const fingerprint = Buffer.alloc(32, 1);
    for (let i = 0; i < 12; i++) {
      const ownerToken = randomUUID();
      const c = await store.claim({ tenantId: 't', key: `k${i}`, fingerprint, ownerToken, leaseMs: 60_000, ttlMs: 3_600_000, onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/x' });
      assert.equal(c.kind, 'claimed');
      await store.commit({ tenantId: 't', key: `k${i}`, ownerToken, response: { status: 201, headers: [], body: Buffer.from('{}'), bodyRetained: true, bodySize: 2 } });
    }
    const rows = await db.query<{ name: string; generic_plans: string; custom_plans: string }>(
      { name: '', text: `SELECT name, generic_plans, custom_plans FROM pg_prepared_statements WHERE name IN ('idem_claim_v1', 'idem_commit_v1')` }, []);
    assert.equal(rows.length, 2, 'both statements prepared on this session');
    for (const r of rows) {
      assert.equal(Number(r.generic_plans), 0, `${r.name} ran a cached generic plan (${r.generic_plans} times)`);
      assert.ok(Number(r.custom_plans) >= 12);
    }
  });
});
