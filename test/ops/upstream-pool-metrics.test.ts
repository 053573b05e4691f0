// The upstream connection pool on /metrics: connections busy and idle, and the
// requests waiting for one. One connection to the upstream; a pass-through
// download holds it (a chunk every 100 ms for 1.6 s) while an idempotent
// request waits behind it, then runs (upstream.timeout 5 s: the wait fits).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { metric, metricsText } from '../helpers/metrics.js';
import { startTestProxy } from '../helpers/proxy.js';
import { oneConnectionYaml, startDownloadUpstream, type TestUpstream } from '../helpers/upstream.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let upstream: TestUpstream;
let proxy: RunningProxy;
const hits = (path: string): number => upstream.received.filter((r) => r.url === path).length;

before(async () => {
  db = await createTestDatabase();
  upstream = await startDownloadUpstream();
  proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: oneConnectionYaml('5s') });
});
after(async () => {
  await proxy?.close();
  await upstream?.close();
  await db?.drop();
});

test('connections busy and idle, and a request waiting for one while every connection is busy', async () => {
  const scrape = async () => {
    const text = await metricsText(proxy.adminUrl);
    return {
      busy: metric(text, 'idempotency_proxy_upstream_connections', { state: 'busy' }),
      idle: metric(text, 'idempotency_proxy_upstream_connections', { state: 'idle' }),
      waiting: metric(text, 'idempotency_proxy_upstream_requests_waiting'),
    };
  };
  assert.deepEqual(await scrape(), { busy: 0, idle: 0, waiting: 0 }, 'no connection before the first request');

  const download = send(`${proxy.url}/download`, { method: 'GET' });
  await waitFor('the download to hold the one connection', () => hits('/download') === 1);
  const order = send(`${proxy.url}/orders/o-1`, { headers: { 'content-type': 'application/json', 'idempotency-key': 'o-1' }, body: '{"n":1}' });
  const during = await waitFor('the order to wait for the connection', async () => {
    const s = await scrape();
    return s.waiting === 1 ? s : undefined;
  }, 1500);
  assert.deepEqual(during, { busy: 1, idle: 0, waiting: 1 });
  assert.equal(hits('/orders/o-1'), 0, 'the order is still waiting');

  assert.equal((await download).status, 200);
  assert.equal((await order).status, 201, 'its wait fitted in upstream.timeout: it ran');
  assert.equal(hits('/orders/o-1'), 1);
  assert.deepEqual(await scrape(), { busy: 0, idle: 1, waiting: 0 }, 'the connection stays open for the next request');
});
