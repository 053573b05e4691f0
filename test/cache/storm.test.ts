import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import type { RunningProxy } from '../../src/app.js';
import { cacheKey } from '../../src/store/cache-codec.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send, together } from '../helpers/http.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { LOADED_MACHINE_TIMEOUT_MS, cacheCounts, claimCount } from './helpers/proxy.js';
import { startTestProxy } from '../helpers/proxy.js';
import { waitFor } from '../helpers/wait.js';
import { deletePrefix, sharedRedis, uniquePrefix } from '../helpers/redis.js';

// A retry storm while the first request runs: every duplicate gets its 409
// (with the route's Retry-After estimate, docs/lifecycle.md), most of them from the Redis in-flight
// marker without a PostgreSQL claim; afterwards every duplicate replays.

const YAML = `
routes:
  - name: pay
    match: { path: "/pay/**" }
    tenant: { constant: t }
    lease: 10s
`;

describe('retry storm with Redis in-flight markers', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let redis: Redis;
  const prefix = uniquePrefix();
  let open!: () => void;
  const gate = new Promise<void>((r) => { open = r; });

  before(async () => {
    redis = await sharedRedis();
    db = await createTestDatabase();
    upstream = await startUpstream(async (req, n, res) => {
      await gate;
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ execution: n, body: req.body.toString() }));
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, redisUrl: 'redis://127.0.0.1:6379', yaml: YAML, start: { redisCache: { prefix, commandTimeoutMs: LOADED_MACHINE_TIMEOUT_MS } } });
  });

  after(async () => {
    open();
    await proxy?.close();
    await upstream?.close();
    if (redis !== undefined) {
      await deletePrefix(redis, prefix);
      redis.disconnect();
    }
    await db?.drop();
  });

  test('30 duplicates at once get 409 from Redis, then replays', async () => {
    const h = { 'idempotency-key': 'storm-1', 'content-type': 'application/json' };
    const body = '{"amount":42}';
    const first = send(`${proxy.url}/pay/x`, { headers: h, body });
    await waitFor('the first request to reach the upstream', () => upstream.executions() === 1, 3000, 5);
    await waitFor('the in-flight marker', async () => (await redis.exists(cacheKey(prefix, 't', 'storm-1'))) === 1, 1000, 5);

    const c0 = await cacheCounts(proxy.metrics);
    const claims0 = await claimCount(proxy.metrics);
    const storm = await together(30, () => send(`${proxy.url}/pay/x`, { headers: h, body }));
    const c1 = await cacheCounts(proxy.metrics);
    const claims1 = await claimCount(proxy.metrics);
    for (const r of storm) {
      assert.equal(r.status, 409);
      assert.equal(r.json().type, 'urn:idempotency-proxy:problem:in-flight');
      const ra = Number(r.headers['retry-after']);
      // No exchange seen on the route yet: the estimate is 1 s, from Redis as from PostgreSQL.
      assert.equal(ra, 1, `Retry-After ${ra}`);
    }
    assert.ok(c1.hit - c0.hit >= 25, `most 409s come from Redis (hits moved by ${c1.hit - c0.hit})`);
    assert.ok(claims1 - claims0 <= 5, `at most a few claims reached PostgreSQL (${claims1 - claims0})`);

    // Same key, other payload, while in flight: PostgreSQL decides (422).
    const other = await send(`${proxy.url}/pay/x`, { headers: h, body: '{"amount":43}' });
    assert.equal(other.status, 422);

    open();
    const done = await first;
    assert.equal(done.status, 201);
    const replays = await together(20, () => send(`${proxy.url}/pay/x`, { headers: h, body }));
    const c2 = await cacheCounts(proxy.metrics);
    for (const r of replays) {
      assert.equal(r.status, 201);
      assert.equal(r.headers['idempotent-replayed'], 'true');
      assert.ok(r.body.equals(done.body));
    }
    assert.ok(c2.hit - c1.hit >= 20, 'replays come from Redis: the completed record replaced the marker');
    assert.equal(upstream.executions(), 1);
  });
});
