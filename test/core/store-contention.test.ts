import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import pg from 'pg';
import { KeyStore } from '../../src/store/key-store.js';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db } from '../../src/store/db/port.js';
import type { StoredResponse } from '../../src/store/records.js';
import { ADMIN_URL, createTestDatabase, lockWaiters, sql, type TestDatabase } from '../helpers/db.js';
import { waitFor } from '../helpers/wait.js';
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

  // The same guarantee, made certain rather than likely: two batches over the
  // same three keys in opposite orders, on two instances (two pools), held at
  // the same point by a third connection that row-locks the middle key. Each
  // batch has locked (or inserted) its first key and waits for the middle one;
  // when the holder lets go, one of them goes on to the other's first key.
  // In input order that is a lock cycle, and PostgreSQL aborts one statement
  // (40P01); in the one global order both batches lock k1 < k2 < k3, so the
  // second simply waits for the first.
  async function heldAtTheMiddleKey<T>(middle: string, run: () => Promise<T>): Promise<T> {
    const holder = new pg.Client({ connectionString: t.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      const locked = await holder.query('SELECT 1 FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2 FOR UPDATE', ['t', middle]);
      assert.equal(locked.rowCount, 1, `the holder row-locks ${middle}`);
      const running = run();
      running.catch(() => {});
      // Both batches are inside their statements and waiting on a lock.
      await waitFor('both batches waiting on a row lock', async () => (await lockWaiters(t.url)) === 2, 10_000, 20);
      await holder.query('ROLLBACK');
      return await running;
    } finally {
      await holder.end();
    }
  }

  const claimOf = (key: string, ownerToken = randomUUID(), leaseMs = 60_000) => ({
    tenantId: 't', key, fingerprint: fp, ownerToken, leaseMs, ttlMs: 3_600_000,
    onExpiredLease: 'reexecute' as const, route: 'r', method: 'POST', path: '/p',
  });

  test('two claim batches in opposite key order, overlapping for certain: both complete, one winner per key', async () => {
    const [k1, k2, k3] = ['d1-k1', 'd1-k2', 'd1-k3'];
    // k3 is a row whose lease ran out: both batches' INSERT ... ON CONFLICT
    // must lock it to take it over (a row lock the holder can hold them at).
    assert.equal((await stores[2]!.claim(claimOf(k3, randomUUID(), 1))).kind, 'claimed');
    await sql(t.url, "UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE idem_key = $1", [k3]);
    const results = await heldAtTheMiddleKey(k3, () => Promise.all([
      // One tick each: every claim of one instance shares one statement, in this order.
      Promise.all([k1, k3, k2].map((k) => stores[0]!.claim(claimOf(k)))),
      Promise.all([k2, k3, k1].map((k) => stores[1]!.claim(claimOf(k)))),
    ].map((p) => p.then((v) => v, (err: unknown) => err))));
    const failures = results.filter((r) => r instanceof Error).map((e) => `${(e as { code?: string }).code ?? ''} ${(e as Error).message}`);
    assert.deepEqual(failures, [], 'no claim statement failed');
    const [first, second] = results as [Array<{ kind: string }>, Array<{ kind: string }>];
    for (const [i, k] of [[0, k1], [1, k3], [2, k2]] as const) {
      const j = [k2, k3, k1].indexOf(k);
      const kinds = [first[i]!.kind, second[j]!.kind].sort();
      assert.deepEqual(kinds, ['claimed', 'in_flight'], `${k}: one batch claimed it, the other found it in flight`);
    }
  });

  test('two commit batches in opposite key order, overlapping for certain: both complete, every row committed', async () => {
    const keys = ['d2-k1', 'd2-k2', 'd2-k3'];
    const tokens = new Map<string, string>();
    for (const k of keys) {
      const ownerToken = randomUUID();
      tokens.set(k, ownerToken);
      assert.equal((await stores[2]!.claim(claimOf(k, ownerToken))).kind, 'claimed');
    }
    const [k1, k2, k3] = keys as [string, string, string];
    // The same commits from both instances (a commit sent again after its reply
    // was lost is written again and reported committed), in opposite orders.
    const commitAll = (store: KeyStore, order: string[]) => Promise.all(order.map((key) => store.commit({ tenantId: 't', key, ownerToken: tokens.get(key)!, response })));
    const results = await heldAtTheMiddleKey(k3, () => Promise.all([
      commitAll(stores[0]!, [k1, k3, k2]),
      commitAll(stores[1]!, [k2, k3, k1]),
    ].map((p) => p.then((v) => v, (err: unknown) => err))));
    const failures = results.filter((r) => r instanceof Error).map((e) => `${(e as { code?: string }).code ?? ''} ${(e as Error).message}`);
    assert.deepEqual(failures, [], 'no commit statement failed');
    for (const batch of results as Array<Array<{ committed: boolean }>>) assert.deepEqual(batch.map((c) => c.committed), [true, true, true]);
    const rows = await sql<{ state: string }>(t.url, 'SELECT state FROM idempotency_keys WHERE idem_key = ANY($1)', [keys]);
    assert.deepEqual(rows.map((r) => r.state), ['complete', 'complete', 'complete']);
  });
});

