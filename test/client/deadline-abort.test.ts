import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { AbortedError, DeadlineExceededError, IdempotentClient } from '../../src/client/index.js';
import { reply, startServer, type TestServer } from './helpers/http-server.js';
import { sleep } from '../helpers/wait.js';

describe('deadline, attempt timeout and cancellation', () => {
  let server: TestServer;
  const hanging: ServerResponse[] = [];
  const closedByClient: string[] = [];

  before(async () => {
    server = await startServer((seen, res, req) => {
      const n = server.seen.filter((s) => s.path === seen.path).length;
      res.on('close', () => {
        if (!res.writableEnded) closedByClient.push(seen.path);
      });
      switch (seen.path) {
        case '/always-503':
          return reply(res, 503);
        case '/hang':
        case '/hang-abort':
          return void hanging.push(res);
        case '/503-then-hang':
          return n === 1 ? reply(res, 503) : void hanging.push(res);
        case '/hang-once':
          return n === 1 ? void hanging.push(res) : reply(res, 201, { n });
        case '/slow-409':
          return reply(res, 409, {}, { 'retry-after': '5' });
        default:
          void req;
          return reply(res, 200);
      }
    });
  });
  after(async () => {
    for (const res of hanging) res.destroy();
    await server.close();
  });

  const client = (opts: Partial<ConstructorParameters<typeof IdempotentClient>[0]> = {}) =>
    new IdempotentClient({ baseUrl: server.url, baseDelayMs: 20, maxDelayMs: 100, maxAttempts: 100, ...opts });

  test('the total deadline stops retrying', async () => {
    const c = client({ deadlineMs: 400 });
    const started = performance.now();
    try {
      await assert.rejects(c.post('/always-503'), (err: unknown) => {
        assert.ok(err instanceof DeadlineExceededError);
        assert.equal(err.code, 'IDEMP_CLIENT_DEADLINE');
        assert.ok(err.attempts >= 2, `attempts ${err.attempts}`);
        assert.equal(err.lastResponse?.status, 503);
        return true;
      });
      assert.ok(performance.now() - started < 1_000, `took ${Math.round(performance.now() - started)} ms`);
    } finally {
      await c.close();
    }
  });

  test('an attempt cut by the deadline keeps the last answer seen as lastResponse', async () => {
    const c = client({ deadlineMs: 400, attemptTimeoutMs: 10_000 });
    try {
      await assert.rejects(c.post('/503-then-hang'), (err: unknown) => {
        assert.ok(err instanceof DeadlineExceededError);
        assert.equal(err.attempts, 2);
        assert.equal(err.lastResponse?.status, 503, 'the 503 of the first attempt (docs/clients.md: the last retryable answer)');
        return true;
      });
    } finally {
      await c.close();
    }
  });

  test('the deadline also bounds an attempt that never answers', async () => {
    const c = client({ deadlineMs: 300, attemptTimeoutMs: 10_000 });
    const started = performance.now();
    try {
      await assert.rejects(c.post('/hang'), (err: unknown) => err instanceof DeadlineExceededError && err.attempts === 1);
      const took = performance.now() - started;
      assert.ok(took >= 290 && took < 1_500, `took ${Math.round(took)} ms`);
    } finally {
      await c.close();
    }
  });

  test('an attempt timeout is retried with the same key', async () => {
    const c = client({ attemptTimeoutMs: 200, deadlineMs: 5_000 });
    try {
      const res = await c.post('/hang-once');
      assert.equal(res.status, 201);
      assert.equal(res.attempts, 2);
      const keys = server.seen.filter((s) => s.path === '/hang-once').map((s) => s.key);
      assert.deepEqual(keys, [res.idempotencyKey, res.idempotencyKey]);
    } finally {
      await c.close();
    }
  });

  test('a Retry-After longer than the remaining deadline fails at once instead of waiting it out', async () => {
    const c = client({ deadlineMs: 3_000, maxDelayMs: 10_000 });
    const started = performance.now();
    try {
      await assert.rejects(c.post('/slow-409'), DeadlineExceededError);
      assert.ok(performance.now() - started < 1_500);
    } finally {
      await c.close();
    }
  });

  test('abort during the wait between attempts rejects with AbortError at once', async () => {
    const c = client({ maxDelayMs: 10_000 });
    const ac = new AbortController();
    const started = performance.now();
    setTimeout(() => ac.abort(new Error('user gave up')), 150);
    try {
      await assert.rejects(c.post('/slow-409', { signal: ac.signal }), (err: unknown) => {
        assert.ok(err instanceof AbortedError);
        assert.equal(err.name, 'AbortError');
        assert.equal(err.code, 'IDEMP_CLIENT_ABORTED');
        assert.equal(err.attempts, 1);
        assert.equal((err.cause as Error).message, 'user gave up');
        return true;
      });
      const took = performance.now() - started;
      assert.ok(took >= 140 && took < 1_500, `took ${Math.round(took)} ms`);
    } finally {
      await c.close();
    }
  });

  test('abort during an attempt cancels the in-flight request', async () => {
    const c = client();
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 150);
    try {
      await assert.rejects(c.post('/hang-abort', { signal: ac.signal, idempotencyKey: 'abort-in-flight' }), (err: unknown) => {
        return err instanceof AbortedError && err.attempts === 1 && err.idempotencyKey === 'abort-in-flight';
      });
      // The server sees the connection go away.
      for (let i = 0; i < 50 && !closedByClient.includes('/hang-abort'); i++) await sleep(10);
      assert.ok(closedByClient.includes('/hang-abort'));
    } finally {
      await c.close();
    }
  });

  test('an already aborted signal sends nothing', async () => {
    const c = client();
    const before = server.seen.length;
    try {
      await assert.rejects(c.post('/ok', { signal: AbortSignal.abort() }), (err: unknown) => err instanceof AbortedError && err.attempts === 0);
      assert.equal(server.seen.length, before);
    } finally {
      await c.close();
    }
  });
});
