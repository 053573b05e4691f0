import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IdempotentClient, OutcomeUnknownError, RetriesExhaustedError, type RetryEvent } from '../../src/client/index.js';
import { reply, startServer, type TestServer } from './helpers/http-server.js';

/**
 * Routes by path: `/script/<name>` answers the scripted statuses in order (the
 * last one repeats), so each test reads as its own scenario.
 */
type Step = { status: number; body?: unknown; headers?: Record<string, string> };

describe('status codes: what is retried and what is final', () => {
  let server: TestServer;
  let client: IdempotentClient;
  const scripts = new Map<string, Step[]>();
  const retries: RetryEvent[] = [];

  before(async () => {
    server = await startServer((seen, res) => {
      const steps = scripts.get(seen.path) ?? [{ status: 200 }];
      const n = server.seen.filter((s) => s.path === seen.path).length - 1;
      const step = steps[Math.min(n, steps.length - 1)]!;
      reply(res, step.status, step.body ?? { n }, step.headers ?? {});
    });
    client = new IdempotentClient({
      baseUrl: server.url,
      baseDelayMs: 5,
      maxDelayMs: 2_000,
      maxAttempts: 4,
      onRetry: (e) => retries.push(e),
    });
  });
  after(async () => {
    await client.close();
    await server.close();
  });

  const count = (path: string) => server.seen.filter((s) => s.path === path).length;

  for (const status of [400, 401, 403, 404, 422]) {
    test(`${status} is returned as the answer, never retried`, async () => {
      const path = `/final-${status}`;
      scripts.set(path, [{ status }, { status: 200 }]);
      const res = await client.post(path);
      assert.equal(res.status, status);
      assert.equal(res.ok, false);
      assert.equal(res.attempts, 1);
      assert.equal(count(path), 1);
    });
  }

  test('429 and 5xx are retried until success', async () => {
    scripts.set('/flaky', [{ status: 429 }, { status: 500 }, { status: 502 }, { status: 200 }]);
    const res = await client.post('/flaky');
    assert.equal(res.status, 200);
    assert.equal(res.ok, true);
    assert.equal(res.attempts, 4);
    assert.deepEqual(retries.filter((e) => e.idempotencyKey === res.idempotencyKey).map((e) => e.status), [429, 500, 502]);
  });

  test('501 Not Implemented is final', async () => {
    scripts.set('/not-impl', [{ status: 501 }, { status: 200 }]);
    const res = await client.post('/not-impl');
    assert.equal(res.status, 501);
    assert.equal(count('/not-impl'), 1);
  });

  test('409 with Retry-After: 1 waits about a second before the retry', async () => {
    scripts.set('/in-flight', [{ status: 409, headers: { 'retry-after': '1' } }, { status: 201 }]);
    const started = performance.now();
    const res = await client.post('/in-flight');
    const waited = performance.now() - started;
    assert.equal(res.status, 201);
    assert.equal(res.attempts, 2);
    assert.ok(waited >= 950 && waited < 3_000, `waited ${Math.round(waited)} ms`);
  });

  test('Retry-After is capped by maxDelayMs', async () => {
    const capped = new IdempotentClient({ baseUrl: server.url, baseDelayMs: 1, maxDelayMs: 50 });
    try {
      scripts.set('/long-retry-after', [{ status: 429, headers: { 'retry-after': '30' } }, { status: 200 }]);
      const started = performance.now();
      const res = await capped.post('/long-retry-after');
      assert.equal(res.status, 200);
      assert.ok(performance.now() - started < 1_000);
    } finally {
      await capped.close();
    }
  });

  test('409 outcome-unknown is not retried and surfaces as OutcomeUnknownError', async () => {
    const problem = { type: 'urn:idempotency-proxy:problem:outcome-unknown', title: 'Outcome unknown', status: 409 };
    scripts.set('/unknown', [{ status: 409, body: problem, headers: { 'content-type': 'application/problem+json', 'retry-after': '1' } }, { status: 200 }]);
    await assert.rejects(client.post('/unknown', { idempotencyKey: 'op-unknown' }), (err: unknown) => {
      assert.ok(err instanceof OutcomeUnknownError);
      assert.equal(err.code, 'IDEMP_CLIENT_OUTCOME_UNKNOWN');
      assert.equal(err.attempts, 1);
      assert.equal(err.idempotencyKey, 'op-unknown');
      assert.equal(err.lastResponse?.status, 409);
      return true;
    });
    assert.equal(count('/unknown'), 1);
  });

  test('a replayed answer is final even when it is a 5xx, and is flagged replayed', async () => {
    scripts.set('/replayed', [{ status: 502, headers: { 'idempotent-replayed': 'true' } }, { status: 200 }]);
    const res = await client.post('/replayed');
    assert.equal(res.status, 502);
    assert.equal(res.replayed, true);
    assert.equal(count('/replayed'), 1);
    scripts.set('/fresh', [{ status: 200 }]);
    assert.equal((await client.post('/fresh')).replayed, false);
  });

  test('when every attempt fails, RetriesExhaustedError carries the last response', async () => {
    scripts.set('/down', [{ status: 503 }]);
    await assert.rejects(client.post('/down'), (err: unknown) => {
      assert.ok(err instanceof RetriesExhaustedError);
      assert.equal(err.code, 'IDEMP_CLIENT_RETRIES_EXHAUSTED');
      assert.equal(err.attempts, 4);
      assert.equal(err.lastResponse?.status, 503);
      return true;
    });
    assert.equal(count('/down'), 4);
  });

  test('404 on a retried DELETE counts as success; on a first attempt it does not', async () => {
    scripts.set('/items/1', [{ status: 503 }, { status: 404 }]);
    const retried = await client.delete('/items/1');
    assert.equal(retried.status, 404);
    assert.equal(retried.attempts, 2);
    assert.equal(retried.ok, true);
    scripts.set('/items/2', [{ status: 404 }]);
    const first = await client.delete('/items/2');
    assert.equal(first.ok, false);
  });
});
