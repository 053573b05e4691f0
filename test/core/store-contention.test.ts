import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { KeyStore } from '../../src/store/key-store.js';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db } from '../../src/store/db/port.js';
import type { StoredResponse } from '../../src/store/records.js';
import { ADMIN_URL, createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { startPgBouncer, type PgBouncer } from '../helpers/pgbouncer.js';

// A retry storm over a few hot keys, on several proxy instances at once:
// batched claims and commits of overlapping keys must never deadlock each
// other (PostgreSQL would abort one statement — every request batched in it
// would get a 500). Statements take their row locks in one global order.
// Directly, and through PgBouncer in transaction mode (unnamed statements).

const fp = createHash('sha256').update('op').digest();
const response: StoredResponse = { status: 201, headers: [['content-type', 'text/plain']], body: Buffer.from('ok'), bodyRetained: true, bodySize: 2 };

for (const via of ['directly', 'through PgBouncer'] as const) describe(`claims and commits under contention, ${via}`, () => {
  let t: TestDatabase;
  let bouncer: PgBouncer | undefined;
  let dbs: Db[];
  let stores: KeyStore[];
  before(async () => {
    t = await createTestDatabase();
    if (via === 'through PgBouncer') bouncer = await startPgBouncer(ADMIN_URL, 8);
    const url = bouncer?.url(t.name) ?? t.url;
    dbs = [0, 1, 2, 3].map(() => createPgDb({ connectionString: url, max: 4, preparedStatements: bouncer === undefined }));
    stores = dbs.map((db) => new KeyStore(db));
  });
  after(async () => {
    await Promise.all((dbs ?? []).map((db) => db.close()));
    await bouncer?.stop();
    await t.drop();
  });

  test('4 instances × 300 requests over 20 hot keys, 8 rounds: no statement fails, one winner per key touched', async () => {
    const failures: string[] = [];
    for (let round = 0; round < 8; round++) {
      const keys = Array.from({ length: 20 }, (_, i) => `r${round}-${i}`);
      const winners = new Map<string, number>();
      await Promise.all(Array.from({ length: 300 }, async (_, j) => {
        const store = stores[j % stores.length]!;
        const key = keys[Math.floor(Math.random() * keys.length)]!;
        const ownerToken = randomUUID();
        try {
          const o = await store.claim({
            tenantId: 't', key, fingerprint: fp, ownerToken, leaseMs: 60_000, ttlMs: 3_600_000,
            onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/p',
          });
          if (o.kind === 'claimed') {
            winners.set(key, (winners.get(key) ?? 0) + 1);
            const c = await store.commit({ tenantId: 't', key, ownerToken, response });
            assert.equal(c.committed, true);
          } else {
            assert.ok(o.kind === 'in_flight' || o.kind === 'complete', o.kind);
          }
        } catch (err) {
          failures.push(`${(err as { code?: string }).code ?? ''} ${(err as Error).message}`);
        }
      }));
      for (const [k, n] of winners) assert.equal(n, 1, `${k}: exactly one claim won`);
    }
    assert.deepEqual(failures.slice(0, 5), [], `${failures.length} statements failed`);
  });
});
