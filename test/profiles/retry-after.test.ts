// Retry-After as an estimate (docs/lifecycle.md, "Retry-After"): a duplicate
// of a request still running gets the route's recent upstream duration in
// whole seconds (at least 1, at most the lease left), not the whole lease —
// through the claim and through the Redis in-flight marker alike. A 503 for
// an unreachable store asks for longer the longer the outage has lasted.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { sleep } from '../helpers/wait.js';

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

const YAML = `
defaults:
  tenant: { constant: t }
  lease: 90s
routes:
  - name: fast
    match: { path: /fast/** }
  - name: slow
    match: { path: /slow/** }
`;

const DELAY: Record<string, number> = { fast: 300, slow: 2600 };

describe('Retry-After estimates', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let cached: RunningProxy;
  const post = (p: RunningProxy, path: string, key: string): Promise<Reply> =>
    send(`${p.url}${path}`, { headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: '{"n":1}' });

  /** The first request, and a duplicate sent 100 ms into it. */
  async function duplicateDuring(p: RunningProxy, path: string, key: string): Promise<{ first: Reply; dup: Reply }> {
    const first = post(p, path, key);
    await sleep(100);
    const dup = await post(p, path, key);
    return { first: await first, dup };
  }

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(async (req, n, res) => {
      const delay = DELAY[req.url!.split('/')[1]!] ?? 0;
      await jsonResponder(201, delay)(req, n, res);
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML });
    try {
      cached = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML, redisUrl: REDIS_URL });
    } catch (err) {
      throw new Error(`Redis is needed at ${REDIS_URL} (start one: redis-server --port 6379): ${(err as Error).message}`);
    }
  });
  after(async () => {
    await proxy?.close();
    await cached?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('a 300 ms call: the duplicate during it gets Retry-After 1 or 2, not the 90 s lease (no history yet, then with)', async () => {
    for (const key of ['cold', 'warm']) {
      const { first, dup } = await duplicateDuring(proxy, '/fast/pay', key);
      assert.equal(first.status, 201);
      assert.equal(dup.status, 409);
      const s = Number(dup.headers['retry-after']);
      assert.ok(s >= 1 && s <= 2, `${key}: Retry-After ${dup.headers['retry-after']}`);
    }
  });

  test('a route whose calls take 2.6 s: Retry-After 3 once it has seen one, still within the lease', async () => {
    await post(proxy, '/slow/pay', 'teach');
    const { dup } = await duplicateDuring(proxy, '/slow/pay', 'slow-dup');
    assert.equal(dup.status, 409);
    assert.equal(dup.headers['retry-after'], '3');
  });

  test('through the Redis in-flight marker (the lookaside answers the 409): the same estimate', async () => {
    await post(cached, '/fast/pay', 'c-teach');
    const { first, dup } = await duplicateDuring(cached, '/fast/pay', 'c-dup');
    assert.equal(first.status, 201);
    assert.equal(dup.status, 409);
    const s = Number(dup.headers['retry-after']);
    assert.ok(s >= 1 && s <= 2, `Retry-After ${dup.headers['retry-after']}`);
  });
});

describe('Retry-After of a 503 store-unavailable', () => {
  test('1 s when the outage begins, then as long as it has lasted', async () => {
    const db = await createTestDatabase();
    const upstream = await startUpstream(jsonResponder(201));
    const proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML });
    try {
      const post = (key: string): Promise<Reply> =>
        send(`${proxy.url}/fast/x`, { headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: '{}' });
      assert.equal((await post('before')).status, 201);
      await db.drop();
      const first = await post('k1');
      assert.equal(first.status, 503);
      assert.equal(first.headers['retry-after'], '1');
      await sleep(2600);
      const later = await post('k2');
      assert.equal(later.status, 503);
      const s = Number(later.headers['retry-after']);
      assert.ok(s >= 3 && s <= 4, `Retry-After after 2.6 s of outage: ${later.headers['retry-after']}`);
      assert.equal(upstream.executions(), 1);
    } finally {
      await proxy.close();
      await upstream.close();
      await db.drop();
    }
  });
});
