// onStoreError — the key store becomes unreachable while the proxy runs (its
// database is dropped, every connection terminated). A `passthrough` route
// forwards requests without deduplication; a `fail` route (the default)
// answers 503 with Retry-After and forwards nothing.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { problemType } from './support.js';
import { metric, metricsText } from '../helpers/metrics.js';
import { type LogLine, startLoggedProxy } from '../helpers/proxy.js';

const YAML = `
defaults:
  tenant: { constant: t }
routes:
  - name: lenient
    match: { path: /lenient/** }
    onStoreError: passthrough
  - name: strict
    match: { path: /strict/** }
`;

describe('onStoreError with the store gone', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let lines: LogLine[];
  const hits = (path: string): number => upstream.received.filter((r) => r.url === path).length;
  const post = (path: string, key: string) => send(`${proxy.url}${path}`, { headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: '{"n":1}' });

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201));
    ({ proxy, lines } = await startLoggedProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML }));
    // Both routes deduplicate while the store is there.
    for (const path of ['/lenient/a', '/strict/a']) {
      assert.equal((await post(path, `${path}-k0`)).status, 201);
      assert.equal((await post(path, `${path}-k0`)).headers['idempotent-replayed'], 'true');
    }
    await db.drop(); // DROP DATABASE … WITH (FORCE): terminates the proxy's connections
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('passthrough: forwarded undeduplicated, every time', async () => {
    const replies = [await post('/lenient/a', 'k1'), await post('/lenient/a', 'k1'), await post('/lenient/a', '/lenient/a-k0')];
    assert.deepEqual(replies.map((r) => r.status), [201, 201, 201]);
    for (const r of replies) assert.equal(r.headers['idempotent-replayed'], undefined);
    assert.equal(hits('/lenient/a'), 4, 'one before the outage, three during it');
    const logged = lines.filter((l) => l.msg === 'request' && l.route === 'lenient').slice(-3);
    for (const l of logged) assert.equal(l.outcome, 'store_error');
  });

  test('fail (default): 503 store-unavailable with Retry-After; nothing reaches the upstream', async () => {
    for (const key of ['k1', '/strict/a-k0']) {
      const r = await post('/strict/a', key);
      assert.equal(r.status, 503, r.text());
      assert.equal(problemType(r), 'store-unavailable');
      assert.ok(Number(r.headers['retry-after']) >= 1, `Retry-After: ${r.headers['retry-after']}`);
    }
    assert.equal(hits('/strict/a'), 1, 'only the request from before the outage');
    const text = await metricsText(proxy.adminUrl);
    assert.ok(metric(text, 'idempotency_proxy_store_errors_total', { op: 'claim' }) >= 5);
  });

  test('readiness reports the store as unreachable', async () => {
    const r = await send(`${proxy.adminUrl}/readyz`, { method: 'GET' });
    assert.equal(r.status, 503);
  });
});
