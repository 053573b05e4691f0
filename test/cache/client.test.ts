import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { createMetrics } from '../../src/metrics/metrics.js';
import { createRedisCache, type RedisCache } from '../../src/store/redis-cache.js';
import type { StoredResponse } from '../../src/store/records.js';
import { LOADED_MACHINE_TIMEOUT_MS, cacheCounts } from './helpers/proxy.js';
import { deletePrefix, SHARED_REDIS_URL, sharedRedis, uniquePrefix } from '../helpers/redis.js';
import { startThrowawayRedis } from '../helpers/servers.js';

// The RedisCache object on its own, against the shared Redis under a
// prefix of its own: the port's contract without the HTTP lifecycle.

const fp = createHash('sha256').update('req').digest();
const other = createHash('sha256').update('other').digest();
const response: StoredResponse = { status: 200, headers: [['content-type', 'text/plain']], body: Buffer.from('ok'), bodyRetained: true, bodySize: 2 };
const settle = () => new Promise((r) => setTimeout(r, 50));

describe('RedisCache', () => {
  let redis: Redis;
  let cache: RedisCache;
  const metrics = createMetrics({ processMetrics: false });
  const prefix = uniquePrefix();

  before(async () => {
    redis = await sharedRedis();
    cache = createRedisCache({ url: SHARED_REDIS_URL, prefix, commandTimeoutMs: LOADED_MACHINE_TIMEOUT_MS }, { metrics });
    assert.equal(await cache.ready(2000), true);
  });

  after(async () => {
    await cache?.close();
    if (redis !== undefined) {
      await deletePrefix(redis, prefix);
      redis.disconnect();
    }
  });

  test('marker, then the completed record replaces it; a later marker does not', async () => {
    cache.rememberInFlight('t', 'a', fp, 5000, 90_000);
    await settle();
    const m = await cache.lookup('t', 'a');
    assert.ok(m?.kind === 'in_flight');
    assert.ok(m.retryAfterS >= 89 && m.retryAfterS <= 90);
    assert.ok(await redis.pttl(cache.key('t', 'a')) <= 5000);
    cache.rememberComplete('t', 'a', fp, response, 60_000);
    cache.rememberInFlight('t', 'a', other, 5000, 90_000);
    await settle();
    const c = await cache.lookup('t', 'a');
    assert.ok(c?.kind === 'complete');
    assert.ok(c.fingerprint.equals(fp));
    assert.equal(c.response.body.toString(), 'ok');
  });

  test('forget and purge remove entries; a miss is counted', async () => {
    cache.rememberInFlight('t', 'b', fp, 5000);
    cache.forget('t', 'b');
    await settle();
    const before = await cacheCounts(metrics);
    assert.equal(await cache.lookup('t', 'b'), null);
    assert.equal((await cacheCounts(metrics)).miss, before.miss + 1);
    cache.rememberComplete('t', 'c', fp, response, 60_000);
    await settle();
    assert.equal(await cache.purge('t', 'c'), true);
    assert.equal(await cache.lookup('t', 'c'), null);
  });

  test('lookups made in one turn of the event loop reach Redis as one MGET, each with its own answer', async () => {
    cache.rememberComplete('t', 'm-hit-1', fp, response, 60_000);
    cache.rememberInFlight('t', 'm-flight', fp, 5000, 90_000);
    cache.rememberComplete('t', 'm-hit-2', other, { ...response, body: Buffer.from('two') }, 60_000);
    await settle();
    const monitor = await redis.monitor();
    const seen: string[][] = [];
    monitor.on('monitor', (_time: string, args: string[]) => {
      if (args.slice(1).some((a) => a.startsWith(prefix))) seen.push(args);
    });
    try {
      const names = Array.from({ length: 20 }, (_, i) => (i === 3 ? 'm-hit-1' : i === 7 ? 'm-flight' : i === 11 ? 'm-hit-2' : `m-none-${i}`));
      const hits = await Promise.all(names.map((n) => cache.lookup('t', n)));
      hits.forEach((h, i) => {
        if (i === 3) assert.ok(h?.kind === 'complete' && h.response.body.toString() === 'ok', `lookup ${i}`);
        else if (i === 7) assert.equal(h?.kind, 'in_flight', `lookup ${i}`);
        else if (i === 11) assert.ok(h?.kind === 'complete' && h.fingerprint.equals(other) && h.response.body.toString() === 'two', `lookup ${i}`);
        else assert.equal(h, null, `lookup ${i}`);
      });
      await settle();
      // One command for the twenty, not twenty GETs.
      assert.deepEqual(seen.map((a) => a[0]!.toLowerCase()), ['mget']);
      assert.deepEqual(seen[0]!.slice(1), names.map((n) => cache.key('t', n)));
    } finally {
      monitor.disconnect();
    }
  });

  test('Redis not answering: lookups of successive turns, and of a turn larger than one MGET, each give up after their own timeout', async () => {
    const stuck = await startThrowawayRedis();
    const timeoutMs = 300;
    const c = createRedisCache({ url: stuck.url, prefix, commandTimeoutMs: timeoutMs, breakerThreshold: 10_000 }, { metrics: createMetrics({ processMetrics: false }) });
    try {
      assert.equal(await c.ready(2000), true);
      stuck.pause();
      const timed = (name: string): Promise<number> => {
        const t0 = performance.now();
        return c.lookup('t', name).then((hit) => {
          assert.equal(hit, null);
          return performance.now() - t0;
        });
      };
      // One turn with 300 lookups, more than one MGET holds, and nothing after it.
      const ms = await Promise.all(Array.from({ length: 300 }, (_, j) => timed(`stuck-big-${j}`)));
      // Then twelve turns in a row, one lookup each: twelve MGETs outstanding at once.
      const took: Array<Promise<number>> = [];
      for (let i = 0; i < 12; i++) {
        took.push(timed(`stuck-${i}`));
        await new Promise((r) => setImmediate(r));
      }
      ms.push(...(await Promise.all(took)));
      // Queued behind the first ones, the later lookups would take two timeouts.
      const slow = ms.filter((x) => x >= timeoutMs * 1.6).length;
      assert.equal(slow, 0, `${slow} of ${ms.length} lookups took more than 1.6 timeouts (timeout ${timeoutMs} ms; slowest ${Math.max(...ms).toFixed(0)} ms)`);
      assert.ok(Math.min(...ms) >= timeoutMs * 0.9, `a lookup gave up before its timeout (${Math.min(...ms).toFixed(0)} ms)`);
    } finally {
      stuck.resume();
      await c.close();
      await stuck.close();
    }
  });

  test('the record TTL is the remaining retention minus a margin, capped', async () => {
    cache.rememberComplete('t', 'd', fp, response, 1000);
    cache.rememberComplete('t', 'e', fp, response, 10 * 3_600_000);
    await settle();
    const d = await redis.pttl(cache.key('t', 'd'));
    const e = await redis.pttl(cache.key('t', 'e'));
    assert.ok(d > 0 && d <= 900, `PTTL ${d}`);
    assert.ok(e > 3_500_000 && e <= 3_600_000, `PTTL ${e} capped at 1 h`);
  });

  test('a bad prefix is refused; after close nothing throws', async () => {
    assert.throws(() => createRedisCache({ url: SHARED_REDIS_URL, prefix: 'a{b}' }, { metrics }), /must not contain/);
    const c2 = createRedisCache({ url: SHARED_REDIS_URL, prefix }, { metrics: createMetrics({ processMetrics: false }) });
    await c2.ready(2000);
    await c2.close();
    assert.equal(await c2.lookup('t', 'a'), null);
    c2.rememberComplete('t', 'x', fp, response, 60_000);
    c2.rememberInFlight('t', 'x', fp, 1000);
    c2.forget('t', 'x');
    assert.equal(await c2.purge('t', 'x'), false);
  });
});
