import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { RunningProxy } from '../../src/app.js';
import { cacheKey } from '../../src/store/cache-codec.js';
import { createTestDatabase, whileBlocked, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { LOADED_MACHINE_TIMEOUT_MS, cacheCounts, claimCount, comparableHeaders } from './helpers/proxy.js';
import { startTestProxy } from '../helpers/proxy.js';
import { deletePrefix, sharedRedis, uniquePrefix } from '../helpers/redis.js';
import { sleep } from '../helpers/wait.js';

// Replays from Redis: no PostgreSQL round trip, byte-for-byte the same answer
// as PostgreSQL gives, TTLs bounded by the row's retention, and no stale
// in-flight marker after a release.

const YAML = `
routes:
  - name: pay
    match: { path: "/pay/**" }
    tenant: { fromHeader: x-tenant }
    storeHeaders: [set-cookie]
    releaseOn: [429]
    lease: 10s
  - name: short
    match: { path: "/short/**" }
    tenant: { constant: t }
    ttl: 2s
    lease: 1s
`;

const BINARY = Buffer.concat([Buffer.from([0x1f, 0x8b, 0x08, 0x00, 0x00, 0xff, 0x00, 0x0d, 0x0a]), randomBytes(3000)]);

describe('replays from the Redis cache', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let redis: Redis;
  const prefix = uniquePrefix();
  const flaky = new Map<string, number>();
  let gate: Promise<void> = Promise.resolve();

  before(async () => {
    redis = await sharedRedis();
    db = await createTestDatabase();
    upstream = await startUpstream(async (req, n, res) => {
      const key = String(req.headers['idempotency-key']);
      if (req.url!.startsWith('/pay/bin')) {
        res.writeHead(201, [
          'content-type', 'application/octet-stream', 'content-encoding', 'gzip',
          'set-cookie', 'a=1; Path=/', 'set-cookie', 'b=2; HttpOnly', 'x-custom', `v\u00e9-${n}`, 'etag', `"${n}"`,
        ]);
        res.end(BINARY);
        return;
      }
      if (req.url!.startsWith('/pay/flaky')) {
        const seen = (flaky.get(key) ?? 0) + 1;
        flaky.set(key, seen);
        if (seen === 1) {
          res.writeHead(429, { 'retry-after': '0', 'content-type': 'text/plain' });
          res.end('slow down');
          return;
        }
      }
      if (req.url!.startsWith('/short/slow')) await gate;
      if (req.url!.startsWith('/pay/big')) {
        res.writeHead(201, { 'content-type': 'text/plain' });
        res.end('x'.repeat(20_000));
        return;
      }
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ execution: n, key }));
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, redisUrl: 'redis://127.0.0.1:6379', yaml: YAML, start: { redisCache: { prefix, commandTimeoutMs: LOADED_MACHINE_TIMEOUT_MS, maxBodyBytes: 8192 } } });
  });

  after(async () => {
    await proxy?.close();
    await upstream?.close();
    if (redis !== undefined) {
      await deletePrefix(redis, prefix);
      redis.disconnect();
    }
    await db?.drop();
  });

  const executionsOf = (key: string) => upstream.received.filter((r) => r.headers['idempotency-key'] === key).length;

  test('after the first execution a replay needs no PostgreSQL at all', async () => {
    const tenant = 'acme}{%7D:x'; // hash-tag characters, escaped in the Redis key
    const h = { 'idempotency-key': 'k-no-pg', 'x-tenant': tenant, 'content-type': 'application/json' };
    const first = await send(`${proxy.url}/pay/bin`, { headers: h, body: '{"amount":1}' });
    assert.equal(first.status, 201);
    assert.ok(first.body.equals(BINARY));
    assert.ok(await redis.exists(cacheKey(prefix, tenant, 'k-no-pg')), 'the completed record is in Redis under the escaped tenant hash tag');

    await whileBlocked(db, async () => {
      const before = await cacheCounts(proxy.metrics);
      const claimsBefore = await claimCount(proxy.metrics);
      const replay = await send(`${proxy.url}/pay/bin`, { headers: h, body: '{"amount":1}' });
      assert.equal(replay.status, 201);
      assert.equal(replay.headers['idempotent-replayed'], 'true');
      assert.ok(replay.body.equals(BINARY), 'body byte for byte');
      assert.deepEqual(replay.headers['set-cookie'], ['a=1; Path=/', 'b=2; HttpOnly']);
      assert.equal((await cacheCounts(proxy.metrics)).hit, before.hit + 1);
      assert.equal(await claimCount(proxy.metrics), claimsBefore, 'no claim statement ran');
      // The control: anything that needs PostgreSQL fails right now.
      const fresh = await send(`${proxy.url}/pay/bin`, { headers: { ...h, 'idempotency-key': 'k-needs-pg' }, body: '{"amount":1}' });
      assert.ok(fresh.status >= 500, `a new key must fail while PostgreSQL is blocked, got ${fresh.status}`);
    });
    assert.equal(executionsOf('k-no-pg'), 1);
  });

  test('a hit answers exactly like PostgreSQL: status, stored headers, body, Idempotent-Replayed', async () => {
    const h = { 'idempotency-key': 'k-same', 'content-type': 'application/json' }; // no x-tenant: the empty tenant
    const first = await send(`${proxy.url}/pay/bin`, { headers: h, body: '{}' });
    assert.equal(first.status, 201);
    const c0 = await cacheCounts(proxy.metrics);
    const fromRedis = await send(`${proxy.url}/pay/bin`, { headers: h, body: '{}' });
    const c1 = await cacheCounts(proxy.metrics);
    assert.equal(c1.hit, c0.hit + 1, 'served from Redis');
    await redis.del(cacheKey(prefix, '', 'k-same'));
    const fromPg = await send(`${proxy.url}/pay/bin`, { headers: h, body: '{}' });
    const c2 = await cacheCounts(proxy.metrics);
    assert.equal(c2.miss, c1.miss + 1, 'served from PostgreSQL');
    assert.equal(fromRedis.status, fromPg.status);
    assert.ok(fromRedis.body.equals(fromPg.body));
    assert.deepEqual(comparableHeaders(fromRedis.headers), comparableHeaders(fromPg.headers));
    assert.equal(fromRedis.headers['idempotent-replayed'], 'true');
    assert.equal(fromRedis.headers['x-custom'], first.headers['x-custom']);
    assert.equal(executionsOf('k-same'), 1);
  });

  test('a cached key reused with another payload falls through to PostgreSQL: 422', async () => {
    const h = { 'idempotency-key': 'k-mismatch', 'x-tenant': 't2', 'content-type': 'application/json' };
    assert.equal((await send(`${proxy.url}/pay/json`, { headers: h, body: '{"a":1}' })).status, 201);
    assert.ok(await redis.exists(cacheKey(prefix, 't2', 'k-mismatch')));
    const other = await send(`${proxy.url}/pay/json`, { headers: h, body: '{"a":2}' });
    assert.equal(other.status, 422);
    assert.equal(executionsOf('k-mismatch'), 1);
  });

  test('tenants never share a cached record', async () => {
    const body = '{"same":true}';
    const a = await send(`${proxy.url}/pay/json`, { headers: { 'idempotency-key': 'k-tenant', 'x-tenant': 'a}', 'content-type': 'application/json' }, body });
    const b = await send(`${proxy.url}/pay/json`, { headers: { 'idempotency-key': 'k-tenant', 'x-tenant': 'a%7D', 'content-type': 'application/json' }, body });
    assert.equal(a.status, 201);
    assert.equal(b.status, 201);
    assert.equal(b.headers['idempotent-replayed'], undefined, 'another tenant executes, never replays');
    assert.equal(executionsOf('k-tenant'), 2);
  });

  test('a release (upstream 429) forgets the in-flight marker: the retry executes, not 409', async () => {
    const h = { 'idempotency-key': 'k-429', 'x-tenant': 't3', 'content-type': 'application/json' };
    const first = await send(`${proxy.url}/pay/flaky`, { headers: h, body: '{}' });
    assert.equal(first.status, 429);
    assert.equal(await redis.exists(cacheKey(prefix, 't3', 'k-429')), 0, 'no marker left behind');
    const retry = await send(`${proxy.url}/pay/flaky`, { headers: h, body: '{}' });
    assert.equal(retry.status, 201);
    assert.equal(retry.headers['idempotent-replayed'], undefined);
    assert.equal(executionsOf('k-429'), 2);
  });

  test('a record too big for the cache is replayed from PostgreSQL at once, never 409 from a leftover marker', async () => {
    const h = { 'idempotency-key': 'k-big', 'x-tenant': 't4', 'content-type': 'application/json' };
    const first = await send(`${proxy.url}/pay/big`, { headers: h, body: '{}' });
    assert.equal(first.status, 201);
    assert.equal(first.body.length, 20_000);
    const replay = await send(`${proxy.url}/pay/big`, { headers: h, body: '{}' });
    assert.equal(replay.status, 201);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.ok(replay.body.equals(first.body));
    assert.equal(await redis.exists(cacheKey(prefix, 't4', 'k-big')), 0);
    assert.equal(executionsOf('k-big'), 1);
  });

  test('a replay served from PostgreSQL puts the record back, with the row\'s remaining retention as its TTL', async () => {
    const h = { 'idempotency-key': 'k-refill', 'content-type': 'application/json' };
    const k = cacheKey(prefix, 't', 'k-refill');
    const first = await send(`${proxy.url}/short/json`, { headers: h, body: '{}' });
    assert.equal(first.status, 201);
    const committedAt = Date.now();
    await redis.del(k); // as after a flush, a restart, or Redis down at commit time
    await sleep(600);
    const c0 = await cacheCounts(proxy.metrics);
    const fromPg = await send(`${proxy.url}/short/json`, { headers: h, body: '{}' });
    assert.equal(fromPg.status, 201);
    assert.equal(fromPg.headers['idempotent-replayed'], 'true');
    assert.equal((await cacheCounts(proxy.metrics)).miss, c0.miss + 1, 'served from PostgreSQL');
    const deadline = Date.now() + 2000;
    while ((await redis.exists(k)) === 0 && Date.now() < deadline) await sleep(5);
    const ttl = await redis.pttl(k);
    // ttl: 2s from the first claim, 600 ms of it gone: never the full 2 s again.
    const left = 2000 - (Date.now() - committedAt);
    assert.ok(ttl > 0 && ttl <= left, `refilled record PTTL ${ttl} must be within the row's remaining retention (< ${left} ms)`);
    const c1 = await cacheCounts(proxy.metrics);
    const fromRedis = await send(`${proxy.url}/short/json`, { headers: h, body: '{}' });
    assert.equal((await cacheCounts(proxy.metrics)).hit, c1.hit + 1, 'the next duplicate is a hit');
    assert.ok(fromRedis.body.equals(fromPg.body));
    assert.deepEqual(comparableHeaders(fromRedis.headers), comparableHeaders(fromPg.headers));
    assert.equal(executionsOf('k-refill'), 1);
  });

  test('TTLs are never longer than the row retention (ttl: 2s) or the lease (lease: 1s)', async () => {
    const h = { 'idempotency-key': 'k-ttl', 'content-type': 'application/json' };
    let open!: () => void;
    gate = new Promise((r) => { open = r; });
    const pending = send(`${proxy.url}/short/slow`, { headers: h, body: '{}' });
    const k = cacheKey(prefix, 't', 'k-ttl');
    const deadline = Date.now() + 2000;
    while (executionsOf('k-ttl') === 0 && Date.now() < deadline) await sleep(5);
    const markerTtl = await redis.pttl(k);
    open();
    assert.equal((await pending).status, 201);
    assert.ok(markerTtl > 0 && markerTtl <= 1000, `in-flight marker PTTL ${markerTtl} must be within the 1s lease`);
    const ttl = await redis.pttl(k);
    assert.ok(ttl > 0 && ttl <= 2000, `completed record PTTL ${ttl} must be within the 2s retention`);
    // Once the row has expired, the key is new again: the cache does not replay it.
    await sleep(2100);
    const again = await send(`${proxy.url}/short/slow`, { headers: h, body: '{}' });
    assert.equal(again.status, 201);
    assert.equal(again.headers['idempotent-replayed'], undefined);
    assert.equal(executionsOf('k-ttl'), 2);
  });
});
