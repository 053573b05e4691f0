// record: reference with the Redis cache serving the replay (no PostgreSQL
// round trip, the current body still fetched), the cache codec keeping the
// reserved entries, and tracing on (the reference entry before the trace
// entry, neither replayed). The core behaviour: reference.test.ts.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import type { RunningProxy } from '../../src/app.js';
import { REFERENCE_RECORD_HEADER, TRACE_RECORD_HEADER } from '../../src/proxy/headers.js';
import { decode, encodeComplete } from '../../src/store/cache-codec.js';
import { createTestDatabase, sql, whileBlocked, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { startReceiver, type Receiver } from '../helpers/otlp.js';
import { startTestProxy } from '../helpers/proxy.js';
import { deletePrefix, sharedRedis, uniquePrefix } from '../helpers/redis.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { LOADED_MACHINE_TIMEOUT_MS, cacheCounts, claimCount } from '../cache/helpers/proxy.js';
import { AUTH, YAML, assertNoReserved, headersFor, orderService, type Order } from './reference-service.js';

describe('record: reference served from the Redis cache', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let redis: Redis;
  const prefix = uniquePrefix();
  const svc = orderService();

  before(async () => {
    redis = await sharedRedis();
    db = await createTestDatabase();
    upstream = await startUpstream(svc.responder);
    proxy = await startTestProxy({
      upstream: upstream.url, databaseUrl: db.url, redisUrl: 'redis://127.0.0.1:6379', yaml: YAML,
      start: { redisCache: { prefix, commandTimeoutMs: LOADED_MACHINE_TIMEOUT_MS } },
    });
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

  test('the cache holds the reference; the replay fetches the current body without PostgreSQL', async () => {
    const first = await send(`${proxy.url}/orders`, { headers: headersFor('ref-cache'), body: '{"amount":2}' });
    assert.equal(first.status, 201);
    const id = (first.json() as Order).id;
    // The PATCH goes to the upstream directly: PostgreSQL is about to be blocked.
    await send(`${upstream.url}/orders/${id}`, { method: 'PATCH', body: '{"state":"paid"}' });

    await whileBlocked(db, async () => {
      const hits = (await cacheCounts(proxy.metrics)).hit;
      const claims = await claimCount(proxy.metrics);
      const retry = await send(`${proxy.url}/orders`, { headers: headersFor('ref-cache'), body: '{"amount":2}' });
      assert.equal(retry.status, 201);
      assert.equal(retry.headers['idempotent-replayed'], 'true');
      assert.deepEqual(retry.json(), { id, state: 'paid', version: 2 });
      assertNoReserved(retry);
      assert.equal((await cacheCounts(proxy.metrics)).hit, hits + 1, 'a cache hit');
      assert.equal(await claimCount(proxy.metrics), claims, 'no claim statement ran');
    });
    assert.equal(upstream.received.filter((r) => r.method === 'POST').length, 1, 'the POST executed once');
    assert.equal(upstream.received.filter((r) => r.method === 'GET').at(-1)!.headers.authorization, AUTH);
  });

  test("the cache codec keeps the reserved entries of a reference record, and its trace context as the reserved last entry", () => {
    const tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const headers = [['location', '/orders/7'], [REFERENCE_RECORD_HEADER, '/orders/7']] as Array<[string, string]>;
    const fp = Buffer.alloc(32, 7);
    // As stored since migration 8 (the trace context beside the headers) and before it (a reserved entry): cached alike.
    for (const rec of [
      { status: 201, headers, body: Buffer.alloc(0), bodyRetained: false, bodySize: 42, trace: tp },
      { status: 201, headers: [...headers, [TRACE_RECORD_HEADER, tp]] as Array<[string, string]>, body: Buffer.alloc(0), bodyRetained: false, bodySize: 42 },
    ]) {
      const hit = decode(encodeComplete(fp, rec, Date.now() + 60_000), Date.now());
      assert.ok(hit !== null && hit.kind === 'complete');
      assert.deepEqual(hit.response.headers, [...headers, [TRACE_RECORD_HEADER, tp]]);
      assert.equal(hit.response.bodyRetained, false);
      assert.equal(hit.response.bodySize, 42);
      assert.equal(hit.response.body.length, 0);
    }
    // No trace context: nothing added.
    const plain = decode(encodeComplete(fp, { status: 200, headers, body: Buffer.from('x'), bodyRetained: true, bodySize: 1, trace: null }, Date.now() + 60_000), Date.now());
    assert.ok(plain !== null && plain.kind === 'complete');
    assert.deepEqual(plain.response.headers, headers);
    assert.equal(plain.response.body.toString(), 'x');
  });
});

describe('record: reference with tracing on', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let receiver: Receiver;
  const svc = orderService();

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(svc.responder);
    receiver = await startReceiver();
  });

  after(async () => {
    await upstream?.close();
    await receiver?.close();
    await db?.drop();
  });

  test('the record keeps the reference entry last and the trace context in its column; neither reaches the client; the GET has its own span', async () => {
    const proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: `${YAML}tracing: { endpoint: "${receiver.url}" }\n` });
    let retry: Reply;
    try {
      const first = await send(`${proxy.url}/orders`, { headers: headersFor('ref-traced'), body: '{}' });
      assert.equal(first.status, 201);
      const id = (first.json() as Order).id;
      await send(`${upstream.url}/orders/${id}`, { method: 'PATCH', body: '{"state":"paid"}' });
      retry = await send(`${proxy.url}/orders`, { headers: headersFor('ref-traced'), body: '{}' });
      const list = await send(`${proxy.adminUrl}/admin/keys`, { method: 'GET' });
      assert.equal((list.json() as { keys: Array<{ record: string }> }).keys[0]?.record, 'reference', 'the listing sees the reference');
    } finally {
      await proxy.close(); // flushes the spans
    }
    assert.equal(retry.status, 201);
    assert.equal((retry.json() as Order).state, 'paid');
    assertNoReserved(retry);
    const [r] = await sql<{ response_headers: Array<[string, string]>; trace_context: string | null }>(db.url,
      'SELECT response_headers, trace_context FROM idempotency_keys WHERE idem_key = $1', ['ref-traced']);
    assert.equal(r!.response_headers.at(-1)![0], REFERENCE_RECORD_HEADER);
    assert.ok(!r!.response_headers.some(([n]) => n === TRACE_RECORD_HEADER));
    assert.match(String(r!.trace_context), /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    const names = receiver.spans.map((sp) => sp.name);
    assert.ok(names.includes('reference'), `a reference span among ${names.join(', ')}`);
  });
});
