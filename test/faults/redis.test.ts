import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RunningProxy } from '../../src/app.js';
import { CACHE_DEFAULTS } from '../../src/store/redis-cache.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { startControlledUpstream, type ControlledUpstream, type Exchange } from './helpers/controlled-upstream.js';
import { freePort } from '../../tools/local-servers.js';
import { startTcpRelay, type TcpRelay } from './helpers/tcp-relay.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startThrowawayRedis, type ThrowawayRedis } from '../helpers/servers.js';

// Redis is a cache, never the source of truth (docs/contract.md, Storage; docs/cache.md): with Redis
// unreachable, slow at the socket level, black-holed or flushed, the proxy
// answers exactly what it answers with no Redis at all — same statuses, same
// bodies, same upstream executions — and no request waits on Redis longer
// than the cache's command timeout. One scripted scenario runs under every
// condition and is compared with the run without Redis.

const YAML = `
upstream: { timeout: 10s }
defaults:
  lease: 2s
  tenant: { fromHeader: x-tenant }
routes:
  - name: pay
    match: { path: "/pay/**" }
`;
/** A relay delay no request may ever wait out: anything near it means Redis was awaited. */
const SLOW_REDIS_MS = 3000;

interface Step { readonly label: string; readonly reply: Reply; readonly ms: number }
type Outcome = Array<[string, number, string | undefined, string]>;

/** Drop what legitimately differs between runs (ids, dates, the run's tag). */
function normalize(steps: readonly Step[], tag: string): Outcome {
  return steps.map((s) => {
    const type = s.reply.status >= 400 ? String(s.reply.json().type) : s.reply.text().split(tag).join('<tag>');
    return [s.label, s.reply.status, s.reply.headers['idempotent-replayed'] as string | undefined, type];
  });
}

describe('Redis unreachable, slow, black-holed or flushed: identical behaviour, bounded latency', () => {
  let db: TestDatabase;
  let redis: ThrowawayRedis;
  let up: ControlledUpstream;
  const held = new Map<string, Exchange>();
  const perKey = new Map<string, number>();
  let baseline: Outcome;
  let baselineExecutions: number[];

  before(async () => {
    db = await createTestDatabase();
    redis = await startThrowawayRedis();
    // k2 is held until the script answers it; k3 is rejected (429) the first time.
    up = await startControlledUpstream((ex) => {
      const k = ex.key ?? '';
      const n = (perKey.get(k) ?? 0) + 1;
      perKey.set(k, n);
      if (k.endsWith('-k2') && n === 1) {
        held.set(k, ex);
        return;
      }
      if (k.endsWith('-k3') && n === 1) return ex.respond(429, '{"slow":"down"}');
      ex.respond(201, JSON.stringify({ key: k, tenant: ex.headers['x-tenant'], body: ex.body.toString(), execution: n }));
    });
  });

  after(async () => {
    await up?.close();
    await redis?.close();
    await db?.drop();
  });

  /** The scenario; `between` runs after every step (e.g. FLUSHALL), `midway` once after step 2. */
  async function scenario(p: RunningProxy, tag: string, hooks: { between?: () => Promise<unknown>; midway?: () => Promise<unknown> } = {}): Promise<{ steps: Step[]; executions: number[] }> {
    const steps: Step[] = [];
    const k = (n: number): string => `${tag}-k${n}`;
    const go = async (label: string, key: string, body: string, tenant = 't1'): Promise<Reply> => {
      const t0 = performance.now();
      const reply = await send(`${p.url}/pay/1`, { headers: { 'idempotency-key': key, 'x-tenant': tenant, 'content-type': 'application/json' }, body });
      steps.push({ label, reply, ms: performance.now() - t0 });
      await hooks.between?.();
      return reply;
    };
    await go('new key', k(1), '{"a":1}');
    await go('replay', k(1), '{"a":1}');
    await hooks.midway?.();
    await go('mismatch', k(1), '{"a":2}');
    // In flight: the first request is held by the upstream.
    const first = send(`${p.url}/pay/1`, { headers: { 'idempotency-key': k(2), 'x-tenant': 't1', 'content-type': 'application/json' }, body: '{"b":1}' });
    await up.arrival((e) => e.key === k(2));
    await go('in flight', k(2), '{"b":1}');
    await go('in flight again', k(2), '{"b":1}');
    held.get(k(2))!.respond(201, JSON.stringify({ key: k(2), held: true }));
    steps.push({ label: 'held first', reply: await first, ms: 0 }); // held on purpose: not a latency sample
    await go('replay of held', k(2), '{"b":1}');
    await go('mismatch of held', k(2), '{"b":2}');
    await go('rejected 429 (released)', k(3), '{"c":1}');
    await go('retry after 429 runs', k(3), '{"c":1}');
    await go('replay after 429', k(3), '{"c":1}');
    await go('other tenant, same key', k(1), '{"a":1}', 't2');
    await go('replay again', k(1), '{"a":1}');
    await go('other tenant replay', k(1), '{"a":1}', 't2');
    return { steps, executions: [1, 2, 3].map((i) => up.executions(k(i))) };
  }

  async function check(tag: string, opts: { redisUrl?: string; midway?: () => Promise<unknown>; between?: () => Promise<unknown>; expectHits?: boolean }): Promise<Step[]> {
    const p = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: YAML, ...(opts.redisUrl === undefined ? {} : { redisUrl: opts.redisUrl }) });
    try {
      const run = await scenario(p, tag, opts);
      assert.deepEqual(normalize(run.steps, tag), baseline, `${tag}: the answers differ from the run without Redis`);
      assert.deepEqual(run.executions, baselineExecutions, `${tag}: upstream executions differ`);
      const results = Object.fromEntries((await p.metrics.cache.get()).values.map((v) => [v.labels.result, v.value]));
      if (opts.expectHits) assert.ok((results.hit ?? 0) > 0, `${tag}: the cache must really have answered (${JSON.stringify(results)})`);
      return run.steps;
    } finally {
      await p.close();
    }
  }

  // Far below one slowed Redis round trip (2 × SLOW_REDIS_MS), far above the
  // command timeout plus a PostgreSQL claim on a loaded machine.
  const boundMs = Math.max(CACHE_DEFAULTS.commandTimeoutMs * 10, 1500);
  const assertBounded = (steps: Step[], what: string): void => {
    const slowest = Math.max(...steps.map((s) => s.ms));
    assert.ok(slowest < boundMs, `${what}: a request took ${Math.round(slowest)} ms; Redis must never be waited on past its ${CACHE_DEFAULTS.commandTimeoutMs} ms timeout`);
  };

  test('baseline: no Redis', async () => {
    const p = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: YAML });
    try {
      const run = await scenario(p, 'none');
      baseline = normalize(run.steps, 'none');
      baselineExecutions = run.executions;
      assert.deepEqual(baseline.map((s) => s[1]), [201, 201, 422, 409, 409, 201, 201, 422, 429, 201, 201, 201, 201, 201]);
      assert.deepEqual(baselineExecutions, [2, 1, 2], 'k1 once per tenant, k2 once, k3 rejected then run once');
    } finally {
      await p.close();
    }
  });

  test('healthy Redis', async () => {
    await check('healthy', { redisUrl: redis.url, expectHits: true });
  });

  test('Redis unreachable (nothing listens on its port)', async () => {
    const steps = await check('unreachable', { redisUrl: `redis://127.0.0.1:${await freePort()}` });
    assertBounded(steps, 'unreachable');
  });

  test(`Redis slow at the socket level (+${SLOW_REDIS_MS} ms per packet from mid-run on)`, async () => {
    const relay: TcpRelay = await startTcpRelay(redis.port);
    try {
      const steps = await check('slow', { redisUrl: `redis://127.0.0.1:${relay.port}`, midway: async () => relay.setDelay(SLOW_REDIS_MS) });
      assertBounded(steps, 'slow');
    } finally {
      await relay.close();
    }
  });

  test('Redis slow but within its timeout (+10 ms per packet)', async () => {
    const relay = await startTcpRelay(redis.port);
    try {
      relay.setDelay(10);
      const steps = await check('slowish', { redisUrl: `redis://127.0.0.1:${relay.port}`, expectHits: true });
      assertBounded(steps, 'slowish');
    } finally {
      await relay.close();
    }
  });

  test('Redis black-holed mid-run (accepts, never answers)', async () => {
    const relay = await startTcpRelay(redis.port);
    try {
      const steps = await check('blackhole', { redisUrl: `redis://127.0.0.1:${relay.port}`, midway: async () => relay.setBlackhole(true) });
      assertBounded(steps, 'blackhole');
    } finally {
      await relay.close();
    }
  });

  test('Redis flushed after every request', async () => {
    await check('flushed', { redisUrl: redis.url, between: () => redis.command('FLUSHALL') });
  });

  test('Redis killed mid-run and started again', async () => {
    const steps = await check('killed', { redisUrl: redis.url, midway: () => redis.kill(), between: async () => {} });
    assertBounded(steps, 'killed');
    await redis.start();
  });
});
