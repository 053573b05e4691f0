import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IdempotentClient, RequestFailedError } from '../../src/client/index.js';
import { freePort } from '../../tools/local-servers.js';
import { reply, startServer, type TestServer } from './helpers/http-server.js';
import { startCuttingRelay, type CuttingRelay } from './helpers/relay.js';
import { sleep } from '../helpers/wait.js';

const fast = { baseDelayMs: 20, maxDelayMs: 50, maxAttempts: 20, deadlineMs: 5_000 };

describe('transport failures are retried with the same key', () => {
  const cleanup: Array<() => Promise<void>> = [];
  after(async () => {
    for (const fn of cleanup.reverse()) await fn();
  });

  test('connection refused, then the server comes up', async () => {
    const port = await freePort();
    const client = new IdempotentClient({ baseUrl: `http://127.0.0.1:${port}`, ...fast });
    cleanup.push(() => client.close());
    const pending = client.post('/late', { json: { a: 1 } });
    await sleep(150);
    const server = await startServer((_seen, res) => reply(res, 201, { ok: true }), port);
    cleanup.push(() => server.close());
    const res = await pending;
    assert.equal(res.status, 201);
    assert.ok(res.attempts > 1, `attempts ${res.attempts}`);
    assert.deepEqual(server.seen.map((s) => s.key), [res.idempotencyKey]);
  });

  test('reset before any response, and socket closed mid-response', async () => {
    const server = await startServer((seen, res) => {
      const n = server.seen.length;
      if (n === 1) return void res.socket?.destroy(); // reset, no bytes
      if (n === 2) {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
        res.write('{"partial":');
        setTimeout(() => res.socket?.destroy(), 20); // closed mid-body
        return;
      }
      reply(res, 200, { n, key: seen.key });
    });
    cleanup.push(() => server.close());
    const client = new IdempotentClient({ baseUrl: server.url, ...fast });
    cleanup.push(() => client.close());
    const res = await client.post('/x', { json: { a: 1 } });
    assert.equal(res.attempts, 3);
    assert.deepEqual(res.json(), { n: 3, key: res.idempotencyKey });
    assert.deepEqual(server.seen.map((s) => s.key), Array(3).fill(res.idempotencyKey));
  });

  test('a transport error retrying cannot fix is not retried (RequestFailedError)', async () => {
    const server = await startServer((_seen, res) => {
      res.writeHead(200, { 'x-huge': 'a'.repeat(70 * 1024) });
      res.end();
    });
    cleanup.push(() => server.close());
    const client = new IdempotentClient({ baseUrl: server.url, ...fast });
    cleanup.push(() => client.close());
    await assert.rejects(client.post('/huge'), (err: unknown) => {
      assert.ok(err instanceof RequestFailedError);
      assert.equal(err.code, 'IDEMP_CLIENT_REQUEST_FAILED');
      assert.equal((err.cause as { code?: string }).code, 'UND_ERR_HEADERS_OVERFLOW');
      return true;
    });
    assert.equal(server.seen.length, 1);
  });
});

describe('control: a lost response against a bare upstream (no proxy)', () => {
  let upstream: TestServer;
  let relay: CuttingRelay;
  let client: IdempotentClient;
  let executions = 0;

  before(async () => {
    upstream = await startServer((seen, res) => {
      executions++;
      reply(res, 201, { execution: executions, key: seen.key });
    });
    relay = await startCuttingRelay(upstream.url, 1);
    client = new IdempotentClient({ baseUrl: relay.url, ...fast });
  });
  after(async () => {
    await client.close();
    await relay.close();
    await upstream.close();
  });

  test('the client retries with the same key, and an upstream that ignores keys executes twice', async () => {
    const res = await client.post('/v1/payments', { json: { amount: 100 } });
    assert.equal(relay.cuts(), 1, 'the relay dropped the first answer');
    assert.equal(res.attempts, 2);
    assert.deepEqual(upstream.seen.map((s) => s.key), [res.idempotencyKey, res.idempotencyKey]);
    // This is the double execution the proxy exists to prevent.
    assert.equal(executions, 2);
    assert.deepEqual(res.json(), { execution: 2, key: res.idempotencyKey });
    assert.equal(res.replayed, false);
  });
});
