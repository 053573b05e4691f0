// Graceful shutdown in-process: close() waits for claimed requests to commit
// even when their client went away, and cuts what is left at the deadline.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { startProxy } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/log/logger.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { sleep, waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let upstream: TestUpstream;

before(async () => {
  db = await createTestDatabase();
  upstream = await startUpstream(async (req, _n, res) => {
    const delay = Number(/delay=(\d+)/.exec(req.url)?.[1] ?? 0);
    await sleep(delay);
    res.writeHead(201, { 'content-type': 'text/plain' });
    res.end('created');
  });
});
after(async () => {
  await upstream?.close();
  await db?.drop();
});

const state = async (key: string) =>
  (await sql<{ state: string }>(db.url, 'SELECT state FROM idempotency_keys WHERE idem_key = $1', [key]))[0]?.state;

test('close() waits for a claimed request whose client left, and its record is committed', async () => {
  const proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url });
  const key = randomUUID();
  const abort = new AbortController();
  const sent = request(`${proxy.url}/x?delay=800`, { method: 'POST', headers: { 'idempotency-key': key }, body: 'a', signal: abort.signal }).catch(() => null);
  await waitFor('the call at the upstream', () => upstream.received.some((r) => r.headers['idempotency-key'] === key), 3000);
  abort.abort();
  await sent;
  await proxy.close();
  assert.equal(await state(key), 'complete', 'committed before the pools closed');
  assert.equal(proxy.metrics.inFlight.count, 0);
});

test('past shutdownTimeout, connections are cut and close() still returns', async () => {
  const config = loadConfig({
    text: 'shutdownTimeout: 300ms',
    flags: { upstream: upstream.url, listen: '127.0.0.1:0', admin: '127.0.0.1:0', databaseUrl: db.url },
    env: {},
  });
  const proxy = await startProxy(config, { logger: createLogger('silent') });
  const key = randomUUID();
  const sent = request(`${proxy.url}/x?delay=3000`, { method: 'POST', headers: { 'idempotency-key': key }, body: 'a' }).then(
    async (r) => { await r.body.text(); return 'answered'; },
    () => 'cut',
  );
  await waitFor('the call at the upstream', () => upstream.received.some((r) => r.headers['idempotency-key'] === key), 3000);
  const t0 = Date.now();
  await proxy.close();
  assert.ok(Date.now() - t0 < 2500, `bounded by the 300ms deadline (took ${Date.now() - t0} ms)`);
  assert.equal(await sent, 'cut', 'no complete response without a committed record');
});
