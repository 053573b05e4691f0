import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { createPgDb } from '../../src/store/db/pg.js';
import { KeyStore } from '../../src/store/key-store.js';
import { claimToken } from '../../src/store/claim-token.js';
import { send } from '../helpers/http.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { startTestProxy } from '../helpers/proxy.js';

// The runnable examples of docs/co-commit.md and docs/chain.md, run as they
// are documented: each a node process on a migrated database, failing (exit
// code 1) when the effect it shows did not happen exactly once.

const EXAMPLES = fileURLToPath(new URL('../../../docs/examples/', import.meta.url));

async function run(script: string, env: Record<string, string>): Promise<{ code: number | null; out: string }> {
  const proc = spawn(process.execPath, [`${EXAMPLES}${script}`], { env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d: Buffer) => { out += d.toString(); });
  proc.stderr.on('data', (d: Buffer) => { out += d.toString(); });
  const [code] = await once(proc, 'exit');
  return { code: code as number | null, out };
}

describe('docs/examples', () => {
  let db: TestDatabase;
  before(async () => { db = await createTestDatabase(); });
  after(async () => db?.drop());

  for (const [script, checks] of [
    ['chain-1-client-retry.mjs', 4],
    ['chain-2-provider-webhook.mjs', 2],
    ['chain-3-broker-inbox.mjs', 1],
    ['chain-4-worker-job.mjs', 2],
    ['chain-5-saga-steps.mjs', 1],
  ] as const) {
    test(`${script} runs and shows each effect once`, async () => {
      const r = await run(script, { DATABASE_URL: db.url });
      assert.equal(r.code, 0, r.out);
      assert.equal(r.out.match(/^ok: /gm)?.length, checks, r.out);
    });
  }

  test('order-service.mjs settles in its transaction: a claimed row completes with the order; two requests through the proxy make one order', async () => {
    const proc = spawn(process.execPath, [`${EXAMPLES}order-service.mjs`], { env: { PATH: process.env.PATH, DATABASE_URL: db.url, PORT: '0' }, stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = once(proc, 'exit');
    try {
      const [line] = (await once(proc.stdout, 'data')) as [Buffer];
      const url = `http://127.0.0.1:${(JSON.parse(line.toString()) as { port: number }).port}`;

      const pgDb = createPgDb({ connectionString: db.url, max: 1 });
      try {
        const store = new KeyStore(pgDb);
        const owner = randomUUID();
        const fingerprint = Buffer.alloc(32);
        await store.claim({ tenantId: 'direct', key: 'k-direct', fingerprint, ownerToken: owner, leaseMs: 60_000, ttlMs: 3_600_000, onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/orders' });
        const direct = await send(`${url}/orders`, { headers: { 'idempotency-claim': claimToken('direct', 'k-direct', owner), 'content-type': 'application/json' }, body: '{"amount":7}' });
        assert.equal(direct.status, 201);
        const rec = await store.get('direct', 'k-direct', true);
        assert.deepEqual([rec!.state, rec!.statusCode, rec!.responseBody!.toString()], ['complete', 201, direct.text()]);
      } finally {
        await pgDb.close();
      }

      const proxy = await startTestProxy({ upstream: url, databaseUrl: db.url });
      try {
        const req = { headers: { 'idempotency-key': 'example-order-1', 'content-type': 'application/json' }, body: '{"amount":5}' };
        const first = await send(`${proxy.url}/orders`, req);
        const again = await send(`${proxy.url}/orders`, req);
        assert.equal(first.status, 201);
        assert.equal(again.headers['idempotent-replayed'], 'true');
        assert.equal(again.text(), first.text());
        const [n] = await sql<{ n: number }>(db.url, "SELECT count(*)::int AS n FROM orders WHERE idem_key = 'example-order-1'");
        assert.equal(n!.n, 1);
      } finally {
        await proxy.close();
      }
    } finally {
      proc.kill('SIGTERM');
      await exited;
    }
  });
});
