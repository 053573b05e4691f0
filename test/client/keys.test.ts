import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IdempotentClient, InvalidArgumentError } from '../../src/client/index.js';
import { reply, startServer, type TestServer } from './helpers/http-server.js';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('keys: one per operation, the same on every retry', () => {
  let server: TestServer;
  let client: IdempotentClient;
  // Per path: how many 503s to answer before 201.
  const failures = new Map<string, number>();

  before(async () => {
    server = await startServer((seen, res) => {
      const left = failures.get(seen.path) ?? 0;
      if (left > 0) {
        failures.set(seen.path, left - 1);
        reply(res, 503, { error: 'busy' });
        return;
      }
      reply(res, 201, { path: seen.path, key: seen.key ?? null });
    });
    client = new IdempotentClient({ baseUrl: server.url, baseDelayMs: 5, maxDelayMs: 20 });
  });
  after(async () => {
    await client.close();
    await server.close();
  });

  const seenOn = (path: string) => server.seen.filter((s) => s.path === path);

  test('retries a 503 twice then succeeds, sending the same UUID v4 key every time', async () => {
    failures.set('/a', 2);
    const res = await client.post('/a', { json: { amount: 10 } });
    assert.equal(res.status, 201);
    assert.equal(res.attempts, 3);
    assert.match(res.idempotencyKey ?? '', UUID_V4);
    const keys = seenOn('/a').map((s) => s.key);
    assert.deepEqual(keys, [res.idempotencyKey, res.idempotencyKey, res.idempotencyKey]);
    assert.deepEqual(res.json(), { path: '/a', key: res.idempotencyKey });
    // The body is re-sent byte for byte.
    assert.deepEqual(seenOn('/a').map((s) => s.body), Array(3).fill('{"amount":10}'));
  });

  test('a new operation gets a new key, even with an identical body', async () => {
    const one = await client.post('/b', { json: { amount: 10 } });
    const two = await client.post('/b', { json: { amount: 10 } });
    assert.notEqual(one.idempotencyKey, two.idempotencyKey);
    assert.deepEqual(seenOn('/b').map((s) => s.key), [one.idempotencyKey, two.idempotencyKey]);
  });

  test("the caller's key is used on every attempt", async () => {
    failures.set('/c', 1);
    const res = await client.patch('/c', { json: { x: 1 }, idempotencyKey: 'cart-8812-checkout' });
    assert.equal(res.idempotencyKey, 'cart-8812-checkout');
    assert.deepEqual(seenOn('/c').map((s) => s.key), ['cart-8812-checkout', 'cart-8812-checkout']);
  });

  test('PUT and DELETE go without a key and are still retried', async () => {
    failures.set('/d', 1);
    const put = await client.put('/d', { json: { name: 'x' } });
    assert.equal(put.status, 201);
    assert.equal(put.attempts, 2);
    assert.equal(put.idempotencyKey, null);
    failures.set('/e', 1);
    const del = await client.delete('/e');
    assert.equal(del.attempts, 2);
    assert.deepEqual([...seenOn('/d'), ...seenOn('/e')].map((s) => s.key), [undefined, undefined, undefined, undefined]);
  });

  test('a custom key header is honoured', async () => {
    const custom = new IdempotentClient({ baseUrl: server.url, keyHeader: 'X-Request-Key' });
    try {
      const res = await custom.post('/f', { idempotencyKey: 'k-1' });
      const seen = seenOn('/f')[0]!;
      assert.equal(seen.headers['x-request-key'], 'k-1');
      assert.equal(seen.key, undefined);
      assert.equal(res.idempotencyKey, 'k-1');
    } finally {
      await custom.close();
    }
  });

  test('misuse is refused before anything is sent', async () => {
    const before = server.seen.length;
    const cases: Array<() => Promise<unknown>> = [
      () => client.put('/g', { idempotencyKey: 'k' }), // PUT carries no key
      () => client.post('/g', { headers: { 'idempotency-key': 'k' } }), // key belongs in the option
      () => client.post('/g', { idempotencyKey: '' }),
      () => client.post('/g', { idempotencyKey: 'has space' }),
      () => client.post('/g', { idempotencyKey: 'x'.repeat(256) }),
      () => client.post('/g', { body: 'a', json: {} }),
      () => client.request({ method: 'CONNECT' as never, path: '/g' }),
      () => client.post('g'),
    ];
    for (const run of cases) {
      await assert.rejects(run(), (err: unknown) => err instanceof InvalidArgumentError && err.code === 'IDEMP_CLIENT_INVALID_ARGUMENT');
    }
    assert.equal(server.seen.length, before);
    assert.throws(() => new IdempotentClient({ baseUrl: 'ftp://x' }), InvalidArgumentError);
    assert.throws(() => new IdempotentClient({ baseUrl: server.url, maxAttempts: 0 }), InvalidArgumentError);
  });

  test('a base URL path prefix is kept', async () => {
    const prefixed = new IdempotentClient({ baseUrl: `${server.url}/api/` });
    try {
      await prefixed.post('/h?x=1');
      assert.equal(server.seen.at(-1)!.path, '/api/h?x=1');
    } finally {
      await prefixed.close();
    }
  });
});
