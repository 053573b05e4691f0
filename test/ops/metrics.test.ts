// /metrics after real traffic: every counter and histogram an operator needs
// moves (requests by route and outcome, latency of the request, the upstream
// call and each store operation, keys in flight, lease takeovers, sweeper
// deletions, cache hits and misses, process metrics).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { RunningProxy } from '../../src/app.js';
import { startProxy } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/log/logger.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send, together } from '../helpers/http.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { admin } from './support.js';
import { families, metric } from '../helpers/metrics.js';
import { sleep, waitFor } from '../helpers/wait.js';

const YAML = `
store: { sweepInterval: 100ms }
routes:
  - name: pay
    match: { path: /pay/** }
    tenant: { constant: t }
    required: true
    lease: 300ms
    ttl: 1h
  - name: rest
    match: { path: /** }
    mode: passthrough
`;

let db: TestDatabase;
let upstream: TestUpstream;
let proxy: RunningProxy;

before(async () => {
  db = await createTestDatabase();
  upstream = await startUpstream(async (req, n, res) => {
    const delay = Number(/delay=(\d+)/.exec(req.url)?.[1] ?? 0);
    if (delay > 0) await sleep(delay);
    if (req.url.includes('reset=1')) {
      res.socket?.destroy();
      return;
    }
    const status = Number(/status=(\d+)/.exec(req.url)?.[1] ?? 201);
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ execution: n }));
  });
  const config = loadConfig({
    text: YAML,
    flags: { upstream: upstream.url, listen: '127.0.0.1:0', admin: '127.0.0.1:0', databaseUrl: db.url, redisUrl: 'redis://127.0.0.1:6379' },
    env: {},
  });
  proxy = await startProxy(config, { logger: createLogger('silent'), redisCache: { prefix: `idem-ops-${randomUUID()}:` } });
});

after(async () => {
  await proxy?.close();
  await upstream?.close();
  await db?.drop();
});

const post = (path: string, key: string | null, body = '{"amount":1}') =>
  send(`${proxy.url}${path}`, { headers: { 'content-type': 'application/json', ...(key === null ? {} : { 'idempotency-key': key }) }, body });

test('counters and histograms move with real traffic', async () => {
  const scrape = async (): Promise<string> => {
    const r = await admin(`${proxy.adminUrl}/metrics`);
    assert.equal(r.status, 200);
    return r.text;
  };

  // executed, then replayed (from Redis after the commit)
  const k1 = randomUUID();
  assert.equal((await post('/pay/a', k1)).status, 201);
  const replay = await post('/pay/a', k1);
  assert.equal(replay.headers['idempotent-replayed'], 'true');
  // mismatch: same key, other body
  assert.equal((await post('/pay/a', k1, '{"amount":2}')).status, 422);
  // rejected: key missing on a required route
  assert.equal((await post('/pay/a', null)).status, 400);
  // passthrough
  assert.equal((await send(`${proxy.url}/other`, { method: 'GET' })).status, 201);
  // upstream_error: the upstream drops the connection after the request was sent
  assert.equal((await post('/pay/a?reset=1', randomUUID())).status, 502);
  // released: the upstream's 429 is not bound to the key (store op "release")
  assert.equal((await post('/pay/a?status=429', randomUUID())).status, 429);

  // conflict while the first is in flight; the slow call outlives a third of the
  // 300ms lease, so the heartbeat extends it (store op "extend"), and the
  // keys-in-flight gauge is up while it runs.
  const k2 = randomUUID();
  const slow = post('/pay/slow?delay=1000', k2);
  await waitFor('slow call at the upstream', () => upstream.received.some((r) => r.url === '/pay/slow?delay=1000'), 5000);
  const during = await scrape();
  assert.equal(metric(during, 'idempotency_proxy_keys_in_flight'), 1, 'one key in flight during the slow call');
  const dups = await together(3, () => post('/pay/slow?delay=1000', k2));
  assert.deepEqual(dups.map((d) => d.status), [409, 409, 409]);
  assert.equal((await slow).status, 201);

  // lease takeover: a row left in flight by a crashed holder, lease run out
  // (copied from a committed row of the same request under a new key, which
  // no cache has seen)
  const k3 = randomUUID();
  const k4 = randomUUID();
  assert.equal((await post('/pay/b', k3)).status, 201);
  await sql(db.url, `INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, state, owner_token, attempt, on_expired_lease, locked_until, expires_at, route, method, path)
    SELECT tenant_id, $2, fingerprint, 'in_flight', gen_random_uuid(), 1, on_expired_lease, now() - interval '1 second', expires_at, route, method, path
      FROM idempotency_keys WHERE idem_key = $1`, [k3, k4]);
  const taken = await post('/pay/b', k4);
  assert.equal(taken.status, 201);
  assert.equal(taken.headers['idempotent-replayed'], undefined);

  // sweeper: an expired row is deleted within a sweep interval
  await sql(db.url, "UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE idem_key = $1", [k1]);
  const deadline = Date.now() + 3000;
  let text = await scrape();
  while (metric(text, 'idempotency_proxy_sweeper_deleted_total') < 1 && Date.now() < deadline) {
    await sleep(100);
    text = await scrape();
  }

  const req = (route: string, outcome: string) => metric(text, 'idempotency_proxy_requests_total', { route, outcome });
  assert.ok(req('pay', 'executed') >= 3, 'executed');
  assert.ok(req('pay', 'replayed') >= 1, 'replayed');
  assert.equal(req('pay', 'conflict'), 3, 'conflict');
  assert.equal(req('pay', 'mismatch'), 1, 'mismatch');
  assert.ok(req('pay', 'rejected') >= 2, 'rejected (missing key, released 429)');
  assert.equal(req('rest', 'passthrough'), 1, 'passthrough');
  assert.equal(req('pay', 'upstream_error'), 1, 'upstream_error');

  assert.ok(metric(text, 'idempotency_proxy_request_duration_seconds_count', { route: 'pay', outcome: 'executed' }) >= 3);
  assert.ok(metric(text, 'idempotency_proxy_request_duration_seconds_count', { route: 'pay', outcome: 'conflict' }) >= 3);
  assert.ok(metric(text, 'idempotency_proxy_upstream_duration_seconds_count', { route: 'pay' }) >= 3);
  assert.ok(metric(text, 'idempotency_proxy_upstream_duration_seconds_sum', { route: 'pay' }) >= 1, 'the slow call is in the upstream latency');
  for (const op of ['claim', 'commit', 'release', 'extend']) {
    assert.ok(metric(text, 'idempotency_proxy_store_duration_seconds_count', { op }) >= 1, `store op ${op}`);
  }
  assert.equal(metric(text, 'idempotency_proxy_keys_in_flight'), 0, 'no key in flight afterwards');
  assert.equal(metric(text, 'idempotency_proxy_lease_takeovers_total', { route: 'pay' }), 1, 'lease takeover');
  assert.ok(metric(text, 'idempotency_proxy_sweeper_deleted_total') >= 1, 'sweeper deletion');
  assert.ok(metric(text, 'idempotency_proxy_cache_total', { result: 'miss' }) >= 1, 'cache miss');
  assert.ok(metric(text, 'idempotency_proxy_cache_total', { result: 'hit' }) >= 1, 'cache hit');
  assert.ok(metric(text, 'idempotency_proxy_process_cpu_seconds_total') > 0, 'process metrics');
  assert.ok(families(text).has('idempotency_proxy_nodejs_eventloop_lag_seconds'), 'event loop lag');
  assert.ok(families(text).has('idempotency_proxy_store_errors_total'));
});
