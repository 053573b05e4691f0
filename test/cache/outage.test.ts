import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { breakerOpen, cacheCounts, timed } from './helpers/proxy.js';
import { startTestProxy } from '../helpers/proxy.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { freePort } from '../../tools/local-servers.js';
import { startThrowawayRedis, type ThrowawayRedis } from '../helpers/servers.js';
import { uniquePrefix } from '../helpers/redis.js';

// Redis down, stopped or flushed changes nothing but latency: every key runs
// exactly once, every replay is right (from PostgreSQL), each request stays
// fast (tight command timeout + breaker), and the cache comes back by itself.
// These tests break a redis-server of their own, never the shared one.

const YAML = `
routes:
  - name: pay
    match: { path: "/pay/**" }
    tenant: { constant: t }
    lease: 5s
`;
/**
 * Per request, with Redis dead or stopped: the 50 ms cache timeout plus a
 * normal PostgreSQL round trip fit in 300 ms. On a machine so busy that a
 * control proxy without Redis, driven in the same process at the same time,
 * already had slower requests, the bound is the control's slowest + 150 ms:
 * still far below what waiting on a dead Redis costs (offline queue and
 * reconnect backoff: seconds; a stopped Redis without timeouts: for ever).
 */
const MAX_MS = 300;
/** Keys started after Redis was broken, at least. */
const AFTER_BREAK = 12;

interface Run {
  readonly keys: string[];
  readonly latencies: number[];
  readonly control: number[];
}

describe('Redis down, slow or flushed', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let redis: ThrowawayRedis;
  let proxy: RunningProxy;
  let control: RunningProxy;
  let seq = 0;

  before(async () => {
    db = await createTestDatabase();
    redis = await startThrowawayRedis();
    upstream = await startUpstream((req, n, res) => {
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ execution: n, key: req.headers['idempotency-key'] }));
    });
    proxy = await startTestProxy({
      upstream: upstream.url, databaseUrl: db.url, redisUrl: redis.url, yaml: YAML,
      start: { redisCache: { prefix: uniquePrefix(), commandTimeoutMs: 50, breakerThreshold: 5, breakerCoolDownMs: 200 } },
    });
    control = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, redisUrl: null, yaml: YAML });
  });

  after(async () => {
    redis?.resume();
    await proxy?.close();
    await control?.close();
    await upstream?.close();
    await redis?.close();
    await db?.drop();
  });

  const executionsOf = (key: string) => upstream.received.filter((r) => r.headers['idempotency-key'] === key).length;
  const postTo = (p: RunningProxy, key: string) =>
    timed(`${p.url}/pay/x`, { headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: `{"k":"${key}"}` });
  const post = (key: string) => postTo(proxy, key);

  /** First request then a replay of one key; checks both answers. */
  async function roundTrip(p: RunningProxy, key: string, latencies: number[]): Promise<void> {
    const first = await postTo(p, key);
    assert.equal(first.status, 201, `first ${key}`);
    assert.equal(first.headers['idempotent-replayed'], undefined);
    const replay = await postTo(p, key);
    assert.equal(replay.status, 201, `replay ${key}`);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.ok(replay.body.equals(first.body), `replay of ${key} is the stored body`);
    latencies.push(first.ms, replay.ms);
  }

  /**
   * At least durationMs of traffic: four workers doing round trips (and
   * replays of earlier keys) through the cached proxy, one through the
   * control proxy; `during` breaks Redis meanwhile. On a slow machine it runs
   * on until AFTER_BREAK keys were started after `during` finished (hard cap
   * 10 s), so the broken phase always sees real traffic.
   */
  async function traffic(durationMs: number, during: () => Promise<void>): Promise<Run> {
    const keys: string[] = []; // completed ones only: a key still in flight elsewhere would rightly get 409
    const latencies: number[] = [];
    const controlLatencies: number[] = [];
    const end = Date.now() + durationMs;
    const cap = end + 10_000;
    let broken = false;
    let afterBreak = 0;
    const more = (): boolean => Date.now() < cap && (Date.now() < end || !broken || afterBreak < AFTER_BREAK);
    const worker = async (): Promise<void> => {
      while (more()) {
        if (broken) afterBreak++;
        const key = `k${++seq}`;
        await roundTrip(proxy, key, latencies);
        keys.push(key);
        const old = keys[Math.floor(keys.length / 2)]!;
        const again = await post(old);
        assert.equal(again.status, 201);
        assert.equal(again.headers['idempotent-replayed'], 'true');
        latencies.push(again.ms);
      }
    };
    const controlWorker = async (): Promise<void> => {
      while (more()) await roundTrip(control, `c${++seq}`, controlLatencies);
    };
    const breaking = async (): Promise<void> => {
      try {
        await during();
      } finally {
        broken = true;
      }
    };
    // allSettled: `during` (kill, pause) must have run before the test's finally repairs Redis.
    const results = await Promise.allSettled([worker(), worker(), worker(), worker(), controlWorker(), breaking()]);
    for (const r of results) if (r.status === 'rejected') throw r.reason;
    assert.ok(afterBreak >= AFTER_BREAK, `enough traffic after the break (${afterBreak} keys)`);
    return { keys, latencies, control: controlLatencies };
  }

  function assertOncePerKeyAndFast(run: Run): void {
    for (const k of run.keys) assert.equal(executionsOf(k), 1, `${k} executed exactly once`);
    const bound = Math.max(MAX_MS, Math.max(...run.control) + 150);
    const worst = Math.max(...run.latencies);
    assert.ok(worst < bound, `slowest request took ${worst.toFixed(1)} ms (bound ${bound.toFixed(0)} ms; control's slowest ${Math.max(...run.control).toFixed(1)} ms)`);
  }

  /** Traffic until the breaker has closed and replays are served from Redis again. */
  async function waitForRecovery(): Promise<void> {
    const lat: number[] = [];
    let hits = (await cacheCounts(proxy.metrics)).hit;
    await waitFor('the breaker to close and Redis to serve replays again', async () => {
      await roundTrip(proxy, `recover${++seq}`, lat);
      const now = (await cacheCounts(proxy.metrics)).hit;
      const served = now > hits && (await breakerOpen(proxy.metrics)) === 0;
      hits = now;
      return served;
    }, 8000, 50);
  }

  test('warm: replays come from Redis', async () => {
    const c0 = await cacheCounts(proxy.metrics);
    const run = await traffic(600, async () => {});
    for (const k of run.keys) assert.equal(executionsOf(k), 1);
    const c1 = await cacheCounts(proxy.metrics);
    assert.ok(c1.hit - c0.hit >= run.keys.length / 2, `healthy Redis serves the replays (${c1.hit - c0.hit} hits, ${run.keys.length} keys)`);
    assert.equal(await breakerOpen(proxy.metrics), 0);
  });

  test('Redis killed mid-run: same answers, bounded latency, breaker opens, then recovers after a restart', async () => {
    try {
      const run = await traffic(1200, async () => {
        await sleep(400);
        await redis.kill();
      });
      assertOncePerKeyAndFast(run);
      assert.equal(await breakerOpen(proxy.metrics), 1, 'breaker open while Redis is down');
      const c = await cacheCounts(proxy.metrics);
      assert.ok(c.error >= 5 && c.skipped > 0, `errors then skips (error ${c.error}, skipped ${c.skipped})`);
    } finally {
      await redis.start(); // same port, empty
    }
    await waitForRecovery();
  });

  test('Redis stops answering (SIGSTOP) mid-run: requests finish within the cache timeout, answers correct', async () => {
    try {
      const run = await traffic(1200, async () => {
        await sleep(400);
        redis.pause();
      });
      assertOncePerKeyAndFast(run);
      assert.equal(await breakerOpen(proxy.metrics), 1, 'breaker open while Redis does not answer');
      // The breaker stops asking: most lookups are skipped, only a probe per
      // cool-down (200 ms here) pays the 50 ms timeout.
      const key = run.keys[0]!;
      const c0 = await cacheCounts(proxy.metrics);
      for (let i = 0; i < 20; i++) {
        const r = await post(key);
        assert.equal(r.status, 201);
        assert.equal(r.headers['idempotent-replayed'], 'true');
      }
      const c1 = await cacheCounts(proxy.metrics);
      assert.ok(c1.skipped - c0.skipped >= 10, `lookups skipped while open: ${c1.skipped - c0.skipped} of 20`);
      assert.equal(c1.hit, c0.hit);
    } finally {
      redis.resume();
    }
    await waitForRecovery();
  });

  test('Redis flushed: the next replay comes from PostgreSQL, correct', async () => {
    const key = `flush${++seq}`;
    await roundTrip(proxy, key, []);
    assert.equal(await redis.command('FLUSHALL'), '+OK');
    const c0 = await cacheCounts(proxy.metrics);
    const r = await post(key);
    const c1 = await cacheCounts(proxy.metrics);
    assert.equal(r.status, 201);
    assert.equal(r.headers['idempotent-replayed'], 'true');
    assert.equal(r.json().key, key);
    assert.equal(c1.hit, c0.hit, 'not from Redis');
    assert.equal(c1.miss + c1.error, c0.miss + c0.error + 1);
    // That replay put the record back: the duplicates after it are hits again.
    await waitFor('the replay to refill the cache', async () => {
      const before = (await cacheCounts(proxy.metrics)).hit;
      const again = await post(key);
      assert.equal(again.status, 201);
      assert.equal(again.headers['idempotent-replayed'], 'true');
      return (await cacheCounts(proxy.metrics)).hit === before + 1;
    }, 2000, 20);
    assert.equal(executionsOf(key), 1);
  });

  test('Redis unreachable from the start: the proxy starts and serves from PostgreSQL', async () => {
    const port = await freePort();
    const p2 = await startTestProxy({
      upstream: upstream.url, databaseUrl: db.url, redisUrl: `redis://127.0.0.1:${port}`, yaml: YAML, start: { redisCache: { prefix: uniquePrefix() } },
    });
    try {
      const lat: number[] = [];
      const controlLat: number[] = [];
      for (let i = 0; i < 6; i++) {
        const key = `nostart${++seq}`;
        await Promise.all([roundTrip(p2, key, lat), roundTrip(control, `c${++seq}`, controlLat)]);
        assert.equal(executionsOf(key), 1);
      }
      const bound = Math.max(MAX_MS, Math.max(...controlLat) + 150);
      assert.ok(Math.max(...lat) < bound, `slowest ${Math.max(...lat).toFixed(1)} ms (bound ${bound.toFixed(0)} ms)`);
      assert.equal(await breakerOpen(p2.metrics), 1);
    } finally {
      await p2.close();
    }
  });
});
