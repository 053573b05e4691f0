import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db, Statement } from '../../src/store/db/port.js';
import { claimStatement, claimTenantsStatement, loneInsertStatement, loneReadStatement, takeoverStatement } from '../../src/store/sql/claim.js';
import { commitOneKeptStatement, commitOneStatement, commitStatement, commitTenantsStatement } from '../../src/store/sql/commit.js';
import { extendStatement } from '../../src/store/sql/extend.js';
import { getStatement } from '../../src/store/sql/get.js';
import { purgeStatement } from '../../src/store/sql/purge.js';
import { releaseStatement } from '../../src/store/sql/release.js';
import { abandonFreshStatement, abandonTakeoverStatement } from '../../src/store/sql/abandon.js';
import { markUnknownStatement } from '../../src/store/sql/mark-unknown.js';
import { sweepDeleteStatement } from '../../src/store/sql/sweep.js';
import { claimToken } from '../../src/store/claim-token.js';
import pg from 'pg';
import { citusNodes } from '../helpers/citus.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

// Every statement of the request path touches one tenant (docs/scale.md). On
// Citus (`npm run test:citus`) that makes each a router plan: one task, on
// the tenant's shard, whatever the batch. On plain PostgreSQL (`npm test`)
// each finds its rows by primary key on the proxy's own sessions.

const row = (key: string): unknown[] => [key, 'aa', randomUUID(), 60_000, 3_600_000, 'reexecute', 'r', 'POST', '/p'];
const keys = ['a', 'b', 'c'];
const arrays = [keys, keys.map(() => randomUUID()), [200, 200, 200], ['[]', '[]', '[]'], ['', '', ''], [true, true, true], [0, 0, 0], [null, null, null]];
/** The claim call's parameters for `ks` of tenant t. */
const call = (ks: string[]): unknown[] => ['t', ks, ks.map(() => 'aa'), ks.map(() => randomUUID()), ks.map(() => 60_000),
  ks.map(() => 3_600_000), ks.map(() => 'reexecute'), ks.map(() => 'r'), ks.map(() => 'POST'), ks.map(() => '/p')];
const claims: Array<[string, unknown[]]> = [['claim call (one key)', call(['a'])], ['claim call (batch of 3)', call(keys)]];
const cases: Array<[string, Statement, unknown[]]> = [
  ...claims.map(([label, values]): [string, Statement, unknown[]] => [label, claimStatement, values]),
  ['takeover (one)', takeoverStatement(1), [Date.now() / 1000, 't', ...row('a')]],
  ['takeover (batch of 3)', takeoverStatement(3), [Date.now() / 1000, 't', ...row('a'), ...row('b'), ...row('c')]],
  ['commit (batch)', commitStatement, ['t', ...arrays]],
  ['lone claim: read', loneReadStatement, ['t', 'a']],
  ['lone claim: insert', loneInsertStatement, ['t', 'a', 'aa', randomUUID(), 'reexecute', 60_000, 3_600_000, 'r', 'POST', '/p']],
  ['commit (one)', commitOneStatement, ['t', 'a', randomUUID(), 200, '[]', '', true, 0, null]],
  ['commit (one): kept', commitOneKeptStatement, ['t', 'a', randomUUID()]],
  ['extend', extendStatement, ['t', 'a', randomUUID(), 60_000]],
  ['get', getStatement, ['t', 'a', true]],
  ['release', releaseStatement, ['t', 'a', randomUUID()]],
  ['abandon a lost claim: a new key', abandonFreshStatement, ['t', 'a', randomUUID()]],
  ['abandon a lost claim: a takeover', abandonTakeoverStatement, ['t', 'a', randomUUID()]],
  ['mark outcome unknown (probe)', markUnknownStatement, ['t', 'a', randomUUID()]],
  ['purge', purgeStatement, ['t', 'a']],
  ['sweeper delete', sweepDeleteStatement, ['t', keys]],
  // A batch of several tenants in one statement: plain PostgreSQL only (crossTenantBatches).
  ...(citusNodes === null ? [['commit (several tenants)', commitTenantsStatement, [['t', 't', 'u'], ...arrays]] as [string, Statement, unknown[]]] : []),
];
/** The claims of tenants t (keys a, b) and u (key c) in one call (migration 5). */
const tenantsCall: unknown[] = [['t', 'u'], [2, 3], ...call(keys).slice(1)];

describe(citusNodes === null ? 'statement plans on PostgreSQL' : 'statement plans on Citus', () => {
  let t: TestDatabase;
  let db: Db;
  before(async () => {
    t = await createTestDatabase();
    db = createPgDb({ connectionString: t.url, max: 1 }); // the proxy's session settings
  });
  after(async () => {
    await db?.close();
    await t?.drop();
  });

  for (const [label, stmt, values] of cases) {
    test(`${label}: ${citusNodes === null ? 'by primary key' : 'one task, router-planned'}`, async () => {
      const plan = (await db.query<{ 'QUERY PLAN': string }>({ name: '', text: `EXPLAIN ${stmt.text}` }, values))
        .map((r) => r['QUERY PLAN']).join('\n');
      if (citusNodes === null && (stmt === claimStatement || stmt === claimTenantsStatement)) {
        assert.match(plan, /Function Scan on idempotency_claim/, plan); // its statements: the next test
      } else if (citusNodes === null) {
        assert.doesNotMatch(plan, /Seq Scan on idempotency_keys/, plan);
        assert.match(plan, /idempotency_keys_pkey/, plan);
      } else {
        assert.match(plan, /Custom Scan \(Citus Adaptive\)/, plan);
        assert.match(plan, /Task Count: 1\b/, plan);
        assert.doesNotMatch(plan, /Task Count: (?!1\b)\d+/, plan);
      }
    });
  }
});

// The claim call's own statements (migration 4), with the proxy's session
// settings, planned as auto_explain logs them: by primary key on PostgreSQL.
// (On Citus the call is the one task above; the worker runs them on its shard.)
if (citusNodes === null) {
  describe('the claim call\'s statements on PostgreSQL', () => {
    let t: TestDatabase;
    before(async () => {
      t = await createTestDatabase();
    });
    after(async () => {
      await t?.drop();
    });

    const calls: Array<[string, Statement, unknown[]]> = [
      ...claims.map(([label, values]): [string, Statement, unknown[]] => [label, claimStatement, values]),
      ['claim call of two tenants', claimTenantsStatement, tenantsCall],
    ];
    for (const [label, stmt, values] of calls) {
      test(`${label}: its insert and its read by primary key`, async () => {
        const client = new pg.Client({ connectionString: t.url });
        const plans: string[] = [];
        client.on('notice', (n) => { if (/Query Text/.test(n.message ?? '')) plans.push(n.message!); });
        await client.connect();
        try {
          for (const set of ['SET enable_seqscan = off', 'SET plan_cache_mode = force_generic_plan', "LOAD 'auto_explain'",
            'SET auto_explain.log_min_duration = 0', 'SET auto_explain.log_nested_statements = on', 'SET client_min_messages = log']) {
            await client.query(set);
          }
          await client.query({ name: 'c', text: stmt.text, values }); // inserts
          await client.query({ name: 'c', text: stmt.text, values }); // finds
        } finally {
          await client.end();
        }
        const inner = plans.filter((p) => /idempotency_keys/.test(p) && !/Query Text: SELECT \* FROM idempotency_claim/.test(p) && !/FROM idempotency_claim\(/.test(p));
        assert.ok(inner.some((p) => /Insert on idempotency_keys/.test(p)), plans.join('\n---\n'));
        assert.ok(inner.some((p) => /Index Scan using idempotency_keys_pkey/.test(p)), plans.join('\n---\n'));
        for (const p of inner) assert.doesNotMatch(p, /Seq Scan on idempotency_keys/, p);
      });
    }
  });
}

// The functions of migration 2 (docs/co-commit.md, docs/chain.md) are called
// from the upstream's own transaction, on the coordinator. On Citus the
// settle's UPDATE must run on the tenant's shard alone, and the step marker
// stays in a table Citus leaves on the coordinator (docs/scale.md). With
// citus.multi_task_query_log_level = error, any statement that needs more
// than one task fails: the control (an UPDATE without a tenant) shows it does.
if (citusNodes !== null) {
  describe('migration 2 functions on Citus', () => {
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

    test('idempotency_settle is one task inside a transaction; idempotency_steps is not distributed', async () => {
      const owner = randomUUID();
      await db.query(claimStatement, ['t', ['settle-me'], ['aa'], [owner], [60_000], [3_600_000], ['reexecute'], ['r'], ['POST'], ['/p']]);
      const token = claimToken('t', 'settle-me', owner);
      const settled = await db.transaction(async (tx) => {
        await tx.query({ name: '', text: "SET LOCAL citus.multi_task_query_log_level = 'error'" }, []);
        await tx.query({ name: '', text: 'SAVEPOINT s' }, []);
        await assert.rejects(tx.query({ name: '', text: "UPDATE idempotency_keys SET attempt = attempt WHERE idem_key = 'x'" }, []),
          /multi-task/i, 'the guard refuses a statement over every shard');
        await tx.query({ name: '', text: 'ROLLBACK TO SAVEPOINT s' }, []);
        const [r] = await tx.query<{ ok: boolean }>({ name: '', text: "SELECT idempotency_settle($1, 201, '{}'::jsonb, 'x'::bytea) AS ok" }, [token]);
        const [s] = await tx.query<{ first: boolean }>({ name: '', text: "SELECT idempotency_step('orders', 'o-1', interval '1 day') AS first" }, []);
        assert.equal(s!.first, true);
        return r!.ok;
      });
      assert.equal(settled, true);
      const [row] = await db.query<{ state: string }>({ name: '', text: "SELECT state FROM idempotency_keys WHERE tenant_id = 't' AND idem_key = 'settle-me'" }, []);
      assert.equal(row!.state, 'complete');
      const dist = await db.query<{ t: string }>({ name: '', text: 'SELECT logicalrelid::text AS t FROM pg_dist_partition ORDER BY 1' }, []);
      assert.deepEqual(dist.map((d) => d.t), ['idempotency_keys', 'idempotency_schema_migrations']);
    });
  });
}

// One large tenant among many small ones (keyScope: tenantAndPath makes every
// path a tenant): the generic plans of the proxy's sessions must still probe
// the primary key by tenant and key. Before migration 6 the statistics made
// them probe by tenant alone and filter the keys: a claim of the large tenant
// read every one of its rows (Rows Removed by Filter: 3 997).
if (citusNodes === null) {
  describe('plans with one large tenant among many small ones (migration 6)', () => {
    let t: TestDatabase;
    let client: pg.Client;
    const plans: string[] = [];
    before(async () => {
      t = await createTestDatabase();
      client = new pg.Client({ connectionString: t.url });
      client.on('notice', (n) => { if (/Query Text/.test(n.message ?? '')) plans.push(n.message!); });
      await client.connect();
      const seed = (tenant: string, key: string, n: number): string => `
        INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, state, expires_at, status_code, response_headers,
                                      response_body, body_retained, body_size)
        SELECT ${tenant}, ${key}, '\\xaa', 'complete', now() - interval '1 s', 200, '[]', '\\x00', true, 1
          FROM generate_series(1, ${n}) g`;
      await client.query(seed(`'big'`, `'k' || g`, 4000));
      await client.query(seed(`'small /checkout_sessions/cs_' || g`, `'k'`, 20_000));
      await client.query('ANALYZE idempotency_keys');
      for (const set of ['SET enable_seqscan = off', 'SET plan_cache_mode = force_generic_plan', "LOAD 'auto_explain'",
        'SET auto_explain.log_min_duration = 0', 'SET auto_explain.log_nested_statements = on', 'SET auto_explain.log_analyze = on',
        'SET client_min_messages = log']) {
        await client.query(set);
      }
    });
    after(async () => {
      await client?.end();
      await t?.drop();
    });

    /** The plans logged for `run`, but the outer call's. */
    const logged = async (run: () => Promise<unknown>): Promise<string[]> => {
      plans.length = 0;
      await run();
      return plans.filter((p) => /idempotency_keys/.test(p) && !/Query Text: (SELECT \* FROM idempotency_claim|PREPARE|EXECUTE)/.test(p));
    };
    const byTenantAndKey = (found: string[]): void => {
      assert.ok(found.length > 0, 'no plan logged');
      for (const p of found) {
        // By tenant alone, the large tenant's 4 000 rows come back and are filtered away.
        assert.doesNotMatch(p, /Rows Removed by Filter: \d{3,}/, p);
        assert.match(p, /Index Cond: \(\((\w+\.)?tenant_id = [^\n]*idem_key = /, p);
      }
    };

    test('the claim call finds the large tenant\'s keys by tenant and key', async () => {
      const values = ['big', ['k1', 'k2', 'k3'], ['aa', 'aa', 'aa'], [randomUUID(), randomUUID(), randomUUID()], [60_000, 60_000, 60_000],
        [3_600_000, 3_600_000, 3_600_000], ['reexecute', 'reexecute', 'reexecute'], ['r', 'r', 'r'], ['POST', 'POST', 'POST'], ['/p', '/p', '/p']];
      // Six calls: the function's plans are generic from the first (plan_cache_mode), and stay so.
      for (let i = 0; i < 6; i++) {
        const found = await logged(() => client.query({ name: 'claim', text: claimStatement.text, values }));
        byTenantAndKey(found.filter((p) => /Index Scan|Bitmap/.test(p)));
      }
    });

    test('the commit and the sweeper\'s delete lock the large tenant\'s rows by tenant and key', async () => {
      const keysOf = ['k10', 'k11'];
      const commitValues = ['big', keysOf, keysOf.map(() => randomUUID()), [200, 200], ['[]', '[]'], ['', ''], [true, true], [0, 0], [null, null]];
      for (const [name, stmt, values] of [['commit', commitStatement, commitValues], ['sweep', sweepDeleteStatement, ['big', keysOf]]] as const) {
        for (let i = 0; i < 6; i++) {
          const found = await logged(() => client.query({ name, text: stmt.text, values: values as unknown[] }));
          byTenantAndKey(found);
        }
      }
    });
  });
}
