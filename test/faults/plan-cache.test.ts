import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db } from '../../src/store/db/port.js';
import { KeyStore } from '../../src/store/key-store.js';
import { claimStatement, takeoverStatement } from '../../src/store/sql/claim.js';
import { commitOneStatement, commitStatement } from '../../src/store/sql/commit.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';

// Found by bench/soak.ts: on a database that starts empty, PostgreSQL's
// cached generic plan for the claim and commit statements (chosen after five
// executions, while the table is small) joined the batch by a sequential
// scan of the whole table, so every claim got slower as the table grew —
// throughput halved within a minute. The proxy's sessions rule sequential
// scans out and plan each statement once (generic plan): the plan cached on
// the empty table must still be the index plan once the table is large.

const PLAN_TENANT = 't';

/** Complete rows seed-<from>..seed-<to> of PLAN_TENANT (fingerprint 0x01), written straight into the table. */
const seed = (url: string, from: number, to: number): Promise<unknown> =>
  sql(url, `INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, state, owner_token, attempt, on_expired_lease,
              expires_at, created_at, completed_at, status_code, response_headers, response_body, body_retained, body_size)
            SELECT '${PLAN_TENANT}', 'seed-' || g, '\\x01'::bytea, 'complete', gen_random_uuid(), 1, 'reexecute',
              now() + interval '1 hour', now(), now(), 200, '[]'::jsonb, '\\x7b7d'::bytea, true, 2
            FROM generate_series(${from}, ${to}) g`);

describe('prepared statements keep an index plan made while the table was empty', () => {
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

  test('claims and commits planned on an empty table use the primary key once the table holds 30 000 rows', async () => {
    // Lone requests go as the single-row twins; a second store sends them as
    // the batch statements: every one of the four is planned on the empty table.
    const stores = [
      new KeyStore(db, { maxInFlight: 1 }), new KeyStore(db, { maxInFlight: 1, singleRowStatements: false }),
      new KeyStore(db, { maxInFlight: 1, perKeyStatements: true }), // as on Citus
    ];
    const fingerprint = Buffer.alloc(32, 1);
    const claimAndCommitOn = async (store: KeyStore, key: string): Promise<void> => {
      const ownerToken = randomUUID();
      const c = await store.claim({ tenantId: PLAN_TENANT, key, fingerprint, ownerToken, leaseMs: 60_000, ttlMs: 3_600_000, onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/x' });
      assert.equal(c.kind, 'claimed');
      const done = await store.commit({ tenantId: PLAN_TENANT, key, ownerToken, response: { status: 201, headers: [], body: Buffer.from('{}'), bodyRetained: true, bodySize: 2 } });
      assert.equal(done.committed, true);
      // The replay: the claim call's insert leaves the key alone, its read answers.
      const again = await store.claim({ tenantId: PLAN_TENANT, key, fingerprint, ownerToken: randomUUID(), leaseMs: 60_000, ttlMs: 3_600_000, onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/x' });
      assert.equal(again.kind, 'complete');
    };
    const claimAndCommit = async (key: string): Promise<void> => {
      for (const [i, store] of stores.entries()) await claimAndCommitOn(store, `${key}-${i}`);
    };
    for (let i = 0; i < 6; i++) await claimAndCommit(`k${i}`);
    // A young deployment: autovacuum analyzes a small table, the cached plans
    // are made again from those statistics...
    await seed(t.url, 1, 100);
    await sql(t.url, 'ANALYZE idempotency_keys');
    for (let i = 6; i < 18; i++) await claimAndCommit(`k${i}`);
    // ...and the table grows under them before the next analyze.
    await seed(t.url, 101, 30000);
    // The claim call's own statements are planned inside the function (its
    // plans are cached per session like the others, and not shown by
    // EXPLAIN): none of them may scan the table. Counted by the server.
    const seqScans = async (): Promise<number> => {
      await db.query({ name: '', text: 'SELECT pg_stat_force_next_flush()' }, []);
      const [r] = await db.query<{ n: string }>({ name: '', text: "SELECT seq_scan AS n FROM pg_stat_user_tables WHERE relname = 'idempotency_keys'" }, []);
      return Number(r!.n);
    };
    const scansBefore = await seqScans();
    for (let i = 18; i < 21; i++) await claimAndCommit(`k${i}`);
    const replayed = await stores[0]!.claim({ tenantId: PLAN_TENANT, key: 'seed-29999', fingerprint: Buffer.alloc(1, 1), ownerToken: randomUUID(), leaseMs: 60_000, ttlMs: 3_600_000, onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/x' });
    assert.equal(replayed.kind, 'complete');
    assert.equal(await seqScans(), scansBefore, 'claims, replays and commits on the grown table scanned it sequentially');

    const plan = async (text: string): Promise<string> =>
      (await db.query<{ 'QUERY PLAN': string }>({ name: '', text }, [])).map((r) => r['QUERY PLAN']).join('\n');
    const commitPlan = await plan(`EXPLAIN EXECUTE ${commitStatement.name}('${PLAN_TENANT}', ARRAY['seed-8'], ARRAY[gen_random_uuid()], ARRAY[200],
      ARRAY['[]'], ARRAY['7b7d'], ARRAY[true], ARRAY[2::bigint], ARRAY[NULL::text])`);
    const commitOnePlan = await plan(`EXPLAIN EXECUTE ${commitOneStatement.name}('${PLAN_TENANT}', 'seed-10', gen_random_uuid(), 200, '[]', '7b7d', true, 2, NULL)`);
    for (const [name, p] of [['commit', commitPlan], ['lone commit', commitOnePlan]] as const) {
      assert.doesNotMatch(p, /Seq Scan on idempotency_keys/, `${name} plan scans the whole table:\n${p}`);
      assert.match(p, /idempotency_keys_pkey/, `${name} plan does not use the primary key:\n${p}`);
    }

    // Planned once per session, not once per execution.
    const rows = await db.query<{ name: string; generic_plans: string; custom_plans: string }>(
      { name: '', text: `SELECT name, generic_plans, custom_plans FROM pg_prepared_statements
                          WHERE name = ANY ($1)` }, [[claimStatement.name, commitStatement.name, commitOneStatement.name]]);
    assert.equal(rows.length, 3, 'all three statements prepared on this session');
    for (const r of rows) {
      assert.equal(Number(r.custom_plans), 0, `${r.name} was planned per execution (${r.custom_plans} custom plans)`);
      assert.ok(Number(r.generic_plans) >= 21, `${r.name}: ${r.generic_plans} generic plan executions`);
    }
  });
});

// Before autovacuum's first ANALYZE with rows there are no statistics, and a
// plan cached then estimates a tenant at 1/200 of a table of about one row:
// probing the tenant's range of the primary key and filtering the keys looks
// cheapest. As the table grows under that plan, every claim — replays
// included — and every batch commit reads all of the tenant's rows (seen on
// 2026-12-02: new keys/s from 1 500 to 330 within 80 s of a fresh database;
// a replay's read 6 324 buffers at 30 000 rows). The claim's reads and the
// batch commit reach each row by its own key (migration 7,
// src/store/sql/commit.ts): what they read is counted by the server.
describe('prepared statements planned on an empty table read only their own rows once it has grown, before any ANALYZE', () => {
  let t: TestDatabase;
  let db: Db;
  before(async () => {
    t = await createTestDatabase();
    db = createPgDb({ connectionString: t.url, max: 1 });
  });
  after(async () => {
    await db?.close();
    await t?.drop();
  });

  test('claims, replays and commits of keys among 30 000 rows of their tenant read a few index entries each', async () => {
    // Lone requests (the single-row twins) and the batch statements, as above.
    const stores = [
      new KeyStore(db, { maxInFlight: 1 }), new KeyStore(db, { maxInFlight: 1, singleRowStatements: false }),
      new KeyStore(db, { maxInFlight: 1, perKeyStatements: true }), // as on Citus
    ];
    const fingerprint = Buffer.alloc(32, 1);
    const claim = (store: KeyStore, key: string, ownerToken = randomUUID(), fp = fingerprint) =>
      store.claim({ tenantId: PLAN_TENANT, key, fingerprint: fp, ownerToken, leaseMs: 60_000, ttlMs: 3_600_000, onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/x' });
    const round = async (key: string): Promise<void> => {
      for (const [i, store] of stores.entries()) {
        const ownerToken = randomUUID();
        const k = `${key}-${i}`;
        assert.equal((await claim(store, k, ownerToken)).kind, 'claimed');
        const done = await store.commit({ tenantId: PLAN_TENANT, key: k, ownerToken, response: { status: 201, headers: [], body: Buffer.from('{}'), bodyRetained: true, bodySize: 2 } });
        assert.equal(done.committed, true);
        assert.equal((await claim(store, k)).kind, 'complete');
      }
    };
    // Planned (and cached on this session) while the table is empty.
    for (let i = 0; i < 6; i++) await round(`m${i}`);
    // The table grows, and nothing analyzes it; the keys below sort among the seeded ones.
    await seed(t.url, 1, 30000);
    const entriesRead = async (): Promise<number> => {
      await db.query({ name: '', text: 'SELECT pg_stat_force_next_flush()' }, []);
      const [r] = await db.query<{ n: string }>({ name: '', text: "SELECT idx_tup_read AS n FROM pg_stat_user_indexes WHERE indexrelname = 'idempotency_keys_pkey'" }, []);
      return Number(r!.n);
    };
    const before = await entriesRead();
    for (let i = 0; i < 3; i++) await round(`seed-5${i}x`);
    for (const store of stores) assert.equal((await claim(store, 'seed-29999', randomUUID(), Buffer.alloc(1, 1))).kind, 'complete');
    // 6 keys claimed, committed and replayed, and 2 replays of seeded keys: a few dozen entries.
    const read = (await entriesRead()) - before;
    assert.ok(read < 600, `claims, replays and commits of 8 keys read ${read} primary-key entries of a 30 000-row tenant`);
  });
});

// store.preparedStatements: false (PgBouncer in transaction mode) sends
// unnamed statements and sets nothing on the session. PostgreSQL plans an
// unnamed statement for the values it is bound to, every time (a custom
// plan), and caches nothing: the plan follows the table as it grows, with
// sequential scans allowed as on any server connection a pooler hands out.
describe('unnamed statements are planned for their values, with no session settings', () => {
  let t: TestDatabase;
  before(async () => {
    t = await createTestDatabase();
  });
  after(async () => {
    await t?.drop();
  });

  test('claims and commits of a table analyzed at 100 rows that grew to 30 000 use the primary key', async () => {
    const db = createPgDb({ connectionString: t.url, max: 1, preparedStatements: false });
    try {
      const store = new KeyStore(db, { maxInFlight: 1 });
      const ownerToken = randomUUID();
      const c = await store.claim({ tenantId: PLAN_TENANT, key: 'k', fingerprint: Buffer.alloc(32, 1), ownerToken, leaseMs: 60_000, ttlMs: 3_600_000, onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/x' });
      assert.equal(c.kind, 'claimed');
      const prepared = await db.query<{ n: number }>({ name: '', text: 'SELECT count(*)::int AS n FROM pg_prepared_statements' }, []);
      assert.equal(prepared[0]!.n, 0, 'nothing prepared on the session');
      const settings = await db.query<{ seq: string }>({ name: '', text: "SELECT current_setting('enable_seqscan') AS seq" }, []);
      assert.equal(settings[0]!.seq, 'on', 'the session keeps the server defaults');
    } finally {
      await db.close();
    }
    await seed(t.url, 1, 100);
    await sql(t.url, 'ANALYZE idempotency_keys');
    await seed(t.url, 101, 30000);
    // The plan an unnamed statement gets: planned with its bound values (force_custom_plan).
    const keys = (n: number, at: number): string => `ARRAY[${Array.from({ length: n }, (_, i) => `'seed-${at + i}'`).join(',')}]`;
    const arr = (v: string, n: number): string => `ARRAY[${Array(n).fill(v).join(',')}]`;
    const takeoverArgs = Array.from({ length: 50 }, (_, i) =>
      `'seed-${7 + i}', '01', gen_random_uuid(), 60000, 3600000, 'reexecute', 'r', 'POST', '/x'`).join(', ');
    const plans: Array<[string, string, string]> = [
      ['takeover of 50', takeoverStatement(50).text, `(NULL, '${PLAN_TENANT}', ${takeoverArgs})`],
      ['commit of 50', commitStatement.text, `('${PLAN_TENANT}', ${keys(50, 500)}, ${arr('gen_random_uuid()', 50)}, ${arr('200', 50)},
        ${arr("'[]'", 50)}, ${arr("'7b7d'", 50)}, ${arr('true', 50)}, ${arr('2::bigint', 50)}, ${arr('NULL::text', 50)})`],
      ['lone commit', commitOneStatement.text, `('${PLAN_TENANT}', 'seed-10', gen_random_uuid(), 200, '[]', '7b7d', true, 2, NULL)`],
    ];
    const client = new pg.Client({ connectionString: t.url });
    await client.connect();
    try {
      await client.query('SET plan_cache_mode = force_custom_plan');
      for (const [i, [name, text, args]] of plans.entries()) {
        await client.query(`PREPARE p${i} AS ${text}`);
        const p = (await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN EXECUTE p${i}${args}`)).rows.map((r) => r['QUERY PLAN']).join('\n');
        assert.doesNotMatch(p, /Seq Scan on idempotency_keys/, `${name} plan scans the whole table:\n${p}`);
        assert.match(p, /idempotency_keys_pkey/, `${name} plan does not use the primary key:\n${p}`);
      }
    } finally {
      await client.end();
    }
  });
});
