// The admin listener: /readyz follows the key store (unready while the
// database refuses connections, ready again when it accepts them), /healthz
// does not; the bearer token guards /metrics but not the probes.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, ADMIN_URL, type TestDatabase } from '../helpers/db.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { send } from '../helpers/http.js';
import { admin } from './support.js';
import { sleep, waitFor } from '../helpers/wait.js';

let upstream: TestUpstream;
before(async () => {
  upstream = await startUpstream();
});
after(async () => {
  await upstream?.close();
});

describe('/readyz follows the key store', () => {
  let db: TestDatabase;
  let proxy: RunningProxy;
  const allow = (yes: boolean) => sql(ADMIN_URL, `ALTER DATABASE ${db.name} ALLOW_CONNECTIONS ${yes}`);

  before(async () => {
    db = await createTestDatabase();
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url });
  });
  after(async () => {
    if (db !== undefined) await allow(true).catch(() => {});
    await proxy?.close();
    await db?.drop();
  });

  test('503 while the database is unreachable, 200 when it returns', async () => {
    assert.equal((await admin(`${proxy.adminUrl}/readyz`)).status, 200);
    // Make the test database unreachable without touching the server: refuse
    // new connections and end the proxy's open ones.
    await allow(false);
    await sql(ADMIN_URL, 'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [db.name]);
    const down = await admin(`${proxy.adminUrl}/readyz`);
    assert.equal(down.status, 503);
    assert.match(JSON.parse(down.text).reason, /key store unreachable/);
    assert.equal((await admin(`${proxy.adminUrl}/healthz`)).status, 200, 'alive while unready');
    // Requests fail closed meanwhile: 503 with Retry-After, not executed.
    const before = upstream.executions();
    const r = await send(`${proxy.url}/x`, { headers: { 'idempotency-key': `k-${Date.now()}` }, body: 'a' });
    assert.equal(r.status, 503);
    assert.ok(Number(r.headers['retry-after']) >= 1);
    assert.equal(upstream.executions(), before);

    await allow(true);
    await waitFor('/readyz 200 again', async () => (await admin(`${proxy.adminUrl}/readyz`)).status === 200, 5000);
    assert.equal((await send(`${proxy.url}/x`, { headers: { 'idempotency-key': `k2-${Date.now()}` }, body: 'a' })).status, 201);
  });

  test('503 once a graceful shutdown began, while in-flight requests finish', async () => {
    const slowUp = await startUpstream(async (_req, _n, res) => {
      await sleep(400);
      res.writeHead(201, { 'content-type': 'text/plain' });
      res.end('done');
    });
    const p = await startTestProxy({ upstream: slowUp.url, databaseUrl: db.url });
    try {
      const inflight = send(`${p.url}/x`, { headers: { 'idempotency-key': `s-${Date.now()}` }, body: 'a' });
      await waitFor('upstream call', () => slowUp.received.length === 1, 3000);
      const closed = p.close();
      const r = await admin(`${p.adminUrl}/readyz`);
      assert.equal(r.status, 503);
      assert.match(JSON.parse(r.text).reason, /shutting down/);
      const done = await inflight;
      assert.equal(done.status, 201);
      assert.equal(done.text(), 'done');
      await closed;
    } finally {
      await p.close();
      await slowUp.close();
    }
  });
});

describe('admin bearer token', () => {
  let db: TestDatabase;
  let proxy: RunningProxy;
  before(async () => {
    db = await createTestDatabase();
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: 'adminToken: s3cret-token' });
  });
  after(async () => {
    await proxy?.close();
    await db?.drop();
  });

  test('/metrics needs the token; a wrong or missing one gets 401', async () => {
    const none = await admin(`${proxy.adminUrl}/metrics`);
    assert.equal(none.status, 401);
    assert.match(String(none.headers['www-authenticate']), /^Bearer/);
    assert.equal((await admin(`${proxy.adminUrl}/metrics`, 'wrong')).status, 401);
    assert.equal((await admin(`${proxy.adminUrl}/metrics`, 's3cret-token-but-longer')).status, 401);
    const ok = await admin(`${proxy.adminUrl}/metrics`, 's3cret-token');
    assert.equal(ok.status, 200);
    assert.match(ok.text, /idempotency_proxy_requests_total/);
    assert.equal((await admin(`${proxy.adminUrl}/nope`)).status, 401, 'unknown paths need the token too');
    assert.equal((await admin(`${proxy.adminUrl}/nope`, 's3cret-token')).status, 404);
  });

  test('probes answer without the token (kubelet and Docker carry none)', async () => {
    assert.equal((await admin(`${proxy.adminUrl}/healthz`)).status, 200);
    const ready = await admin(`${proxy.adminUrl}/readyz`);
    assert.equal(ready.status, 200);
    assert.deepEqual(JSON.parse(ready.text), { status: 'ready' });
  });
});
