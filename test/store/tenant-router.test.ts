// The Citus tenant router (src/store/citus/tenant-router.ts): the hash it
// places tenants with, against PostgreSQL's own hashtext() (npm test, plain
// PostgreSQL); and under `npm run test:citus`, the map against Citus's own
// answer, statements landing on the node of the tenant's shard, a node the
// proxy cannot reach left out, and the key store's contract through it.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { hashText } from '../../src/store/citus/hash.js';
import { TenantRouter } from '../../src/store/citus/tenant-router.js';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db } from '../../src/store/db/port.js';
import { KeyStore } from '../../src/store/key-store.js';
import { citusNodes } from '../helpers/citus.js';
import { ADMIN_URL, createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';

const q = (text: string) => ({ name: '', text });

/** Tenants of every length around the hash's 12-byte blocks, multi-byte characters, and random bytes as text. */
function tenants(): string[] {
  const out = ['', 'a', 'tenant-0', 'tenant-12', 'acct_1Nv0FGQ9RKHgCVdK', 'ünïcødé €', '日本語のテナント', '😀 emoji', 't-mix /v1/checkout_sessions/cs_1/complete'];
  for (let n = 0; n <= 40; n++) out.push('k'.repeat(n), Array.from({ length: n }, (_, i) => String.fromCharCode(0x20 + ((i * 37 + n) % 0x5e))).join(''));
  for (let i = 0; i < 200; i++) out.push(randomBytes(1 + (i % 30)).toString('base64'), `tenant-${randomUUID()}`, `ä${'€'.repeat(i % 7)}${i}`);
  return [...new Set(out)];
}

describe('the tenant hash is PostgreSQL\'s hashtext()', () => {
  test('for ASCII, multi-byte and random tenants of every length around its 12-byte blocks', async () => {
    const values = tenants();
    const rows = await sql<{ v: string; h: number }>(ADMIN_URL, 'SELECT v, hashtext(v) AS h FROM unnest($1::text[]) AS v', [values]);
    assert.equal(rows.length, values.length);
    const wrong = rows.filter((r) => hashText(r.v) !== r.h).map((r) => `${JSON.stringify(r.v)}: ${r.h} ≠ ${hashText(r.v)}`);
    assert.deepEqual(wrong, []);
    // With a scratch buffer too small for the value, the hash is the same.
    const long = 'x€'.repeat(200);
    assert.equal(hashText(long, Buffer.alloc(16)), hashText(long));
  });
});

if (citusNodes !== null) {
  const nodes = citusNodes;
  const nodeUrl = (url: string, port: number): string => {
    const u = new URL(url);
    u.port = String(port);
    return u.toString();
  };

  describe('the tenant router on Citus', () => {
    let t: TestDatabase;
    let coordinator: Db;
    const opened: Db[] = [];
    const logs: string[] = [];
    const router = (connect: (host: string, port: number) => Db): TenantRouter => new TenantRouter({
      coordinator, connect, refreshMs: 60_000, log: (level, fields, msg) => logs.push(`${level} ${msg} ${JSON.stringify(fields)}`),
    });
    const connect = (host: string, port: number): Db => {
      const db = createPgDb({ connectionString: nodeUrl(t.url, port), max: 2 });
      opened.push(db);
      return db;
    };
    before(async () => {
      t = await createTestDatabase();
      coordinator = createPgDb({ connectionString: t.url, max: 4 });
    });
    after(async () => {
      await Promise.all(opened.map((d) => d.close().catch(() => undefined)));
      await coordinator?.close();
      await t?.drop();
    });

    test('every tenant goes to the node that holds its shard, by Citus\'s own answer', async () => {
      const r = router(connect);
      await r.start();
      try {
        const d = r.describe();
        assert.equal(d.shards, 32);
        assert.deepEqual(Object.values(d.nodes).sort(), ['up', 'up'], JSON.stringify(d));
        const sample = tenants().slice(0, 120);
        const where = await sql<{ t: string; port: number }>(t.url, `
          SELECT v AS t, n.nodeport AS port FROM unnest($1::text[]) AS v
            JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('idempotency_keys', v)
            JOIN pg_dist_node n ON n.groupid = p.groupid`, [sample]);
        assert.equal(where.length, sample.length);
        const landed = await Promise.all(where.map(async (w) => {
          const [row] = await r.forTenant(w.t).query<{ port: number }>(q('SELECT inet_server_port() AS port'), []);
          return row!.port;
        }));
        const off = where.filter((w, i) => landed[i] !== w.port).map((w, i) => `${JSON.stringify(w.t)}: on ${w.port}, sent to ${landed[i]}`);
        assert.deepEqual(off, []);
        assert.ok(new Set(landed).size === 2, 'both workers get tenants');
        assert.ok(!landed.includes(nodes[0]!), 'none goes through the coordinator');
      } finally {
        await r.close();
      }
    });

    test('a node the proxy cannot reach is left out: its tenants go through the coordinator, and keys are claimed once', async () => {
      // The second worker's address as Citus names it, but the proxy's connection to it goes to a closed port.
      const [deadWorker] = nodes.slice(2);
      const unreachable = (host: string, port: number): Db => (port === deadWorker
        ? createPgDb({ connectionString: nodeUrl(t.url, 1), max: 1, timeoutMs: 1_000 })
        : connect(host, port));
      const r = router(unreachable);
      await r.start();
      try {
        assert.deepEqual(r.describe().nodes, { [`127.0.0.1:${nodes[1]}`]: 'up', [`127.0.0.1:${deadWorker}`]: 'down' });
        assert.ok(logs.some((l) => l.startsWith('warn citus: node not reachable')), logs.join('\n'));
        const store = new KeyStore(coordinator, { crossTenantBatches: false, perKeyStatements: true, tenantDb: (id) => r.forTenant(id) });
        const ids = tenants().slice(0, 40);
        const ports = await Promise.all(ids.map(async (id) => (await r.forTenant(id).query<{ port: number }>(q('SELECT inet_server_port() AS port'), []))[0]!.port));
        assert.ok(ports.includes(nodes[0]!) && ports.includes(nodes[1]!), `coordinator and the live worker: ${[...new Set(ports)].join(', ')}`);
        // Each tenant's key, claimed by five requests at once: one claim, four in flight, wherever it went.
        const outcomes = await Promise.all(ids.flatMap((tenantId) => Array.from({ length: 5 }, () => store.claim({
          tenantId, key: 'k-once', fingerprint: Buffer.alloc(32, 7), ownerToken: randomUUID(), leaseMs: 60_000, ttlMs: 3_600_000,
          onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/p',
        }))));
        const claimed = outcomes.filter((o) => o.kind === 'claimed').length;
        assert.equal(claimed, ids.length);
        assert.equal(outcomes.filter((o) => o.kind === 'in_flight').length, ids.length * 4);
        const [rows] = await sql<{ n: number }>(t.url, "SELECT count(*)::int AS n FROM idempotency_keys WHERE idem_key = 'k-once'");
        assert.equal(rows!.n, ids.length);
      } finally {
        await r.close();
      }
    });

    test('a node that fails while in use is left out at once; a refresh that reaches it takes it back', async () => {
      let broken = true;
      const [worker] = nodes.slice(1);
      const flaky = (host: string, port: number): Db => {
        const real = connect(host, port);
        if (port !== worker) return real;
        const dead = createPgDb({ connectionString: nodeUrl(t.url, 1), max: 1, timeoutMs: 1_000 });
        opened.push(dead);
        return { ...real, query: (stmt, values, ms) => (broken ? dead.query(stmt, values, ms) : real.query(stmt, values, ms)) };
      };
      broken = false;
      const r = router(flaky);
      await r.start();
      try {
        const port = async (id: string) => (await r.forTenant(id).query<{ port: number }>(q('SELECT inet_server_port() AS port'), []))[0]!.port;
        const ids = tenants().slice(0, 60);
        const ports = await Promise.all(ids.map(port));
        const workerTenant = ids[ports.indexOf(worker!)];
        assert.ok(workerTenant !== undefined, `a tenant on port ${worker}: ${[...new Set(ports)].join(', ')}`);
        broken = true;
        await assert.rejects(r.forTenant(workerTenant).query(q('SELECT 1'), []));
        assert.equal(r.forTenant(workerTenant), coordinator, 'after the failure: through the coordinator');
        assert.equal(await port(workerTenant), nodes[0]);
        broken = false;
        await r.refresh();
        assert.equal(await port(workerTenant), worker, 'the refresh reached it: direct again');
      } finally {
        await r.close();
      }
    });
  });
}
