import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { IdempotentClient, type RetryEvent } from '../../src/client/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { spawnProxy } from '../helpers/proxy.js';
import { reply, startServer, type TestServer } from './helpers/http-server.js';
import { startCuttingRelay, type CuttingRelay } from './helpers/relay.js';

/**
 * The headline: client → cutting relay → real proxy (real PostgreSQL) → upstream
 * that counts executions. The relay drops the first answer after the upstream
 * has executed; the client retries with the same key; the proxy replays.
 */
describe('through the real proxy: a lost answer is replayed, never executed twice', () => {
  let db: TestDatabase;
  let upstream: TestServer;
  let proxy: Awaited<ReturnType<typeof spawnProxy>>;
  let relay: CuttingRelay;
  let client: IdempotentClient;
  const executions: string[] = []; // the exact bodies the upstream sent, in order
  const retries: RetryEvent[] = [];

  before(async () => {
    db = await createTestDatabase();
    upstream = await startServer((seen, res) => {
      const body = JSON.stringify({ execution: executions.length + 1, chargeId: randomUUID(), key: seen.key ?? null });
      executions.push(body);
      const send = () => {
        res.writeHead(201, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      };
      if (seen.path.startsWith('/v1/slow/')) setTimeout(send, 300);
      else send();
    });
    proxy = await spawnProxy([
      'serve',
      '--upstream', upstream.url,
      '--listen', '127.0.0.1:0',
      '--admin', '127.0.0.1:0',
      '--database-url', db.url,
    ]);
    relay = await startCuttingRelay(proxy.url, 1);
    client = new IdempotentClient({
      baseUrl: relay.url,
      baseDelayMs: 50,
      maxDelayMs: 500, // the proxy's 409 Retry-After is the lease's remaining seconds; keep the test short
      maxAttempts: 20,
      deadlineMs: 15_000,
      onRetry: (e) => retries.push(e),
    });
  });

  after(async () => {
    await client?.close();
    await relay?.close();
    await proxy?.stop();
    await upstream?.close();
    await db?.drop();
  });

  test('the upstream executes once and the retry gets the first execution, replayed', async () => {
    const res = await client.post('/v1/payments', { json: { amount: 4200, currency: 'EUR' } });

    assert.equal(relay.cuts(), 1, 'the relay dropped the first answer');
    assert.equal(executions.length, 1, `upstream executed ${executions.length} times`);
    assert.deepEqual(upstream.seen.map((s) => s.key), [res.idempotencyKey], 'the proxy passed the key on, once');
    assert.ok(res.attempts >= 2, `attempts ${res.attempts}`);
    assert.equal(res.status, 201);
    assert.equal(res.replayed, true);
    assert.equal(res.text(), executions[0], "the client got the first execution's body, byte for byte");
    assert.equal((res.json() as { execution: number }).execution, 1);
    assert.ok(retries.every((e) => e.idempotencyKey === res.idempotencyKey));
  });

  test('a new operation with the same body gets a new key and executes', async () => {
    const before = executions.length;
    const res = await client.post('/v1/payments', { json: { amount: 4200, currency: 'EUR' } });
    assert.equal(res.attempts, 1);
    assert.equal(res.replayed, false);
    assert.equal(executions.length, before + 1);
    assert.equal(res.text(), executions.at(-1));
  });

  test('concurrent retries of one operation: one execution, everyone gets its answer', async () => {
    const direct = new IdempotentClient({ baseUrl: proxy.url, baseDelayMs: 50, maxDelayMs: 300, maxAttempts: 30, deadlineMs: 15_000 });
    try {
      const before = executions.length;
      const key = randomUUID();
      const results = await Promise.all(
        Array.from({ length: 8 }, () => direct.post('/v1/slow/orders', { json: { sku: 'A-1', qty: 2 }, idempotencyKey: key })),
      );
      assert.equal(executions.length, before + 1, 'exactly one execution');
      const first = executions.at(-1);
      for (const r of results) {
        assert.equal(r.status, 201);
        assert.equal(r.text(), first);
      }
      assert.equal(results.filter((r) => !r.replayed).length, 1, 'one original, the rest replays');
    } finally {
      await direct.close();
    }
  });
});
