// profile: ietf (the default) — draft-ietf-httpapi-idempotency-key-header-07
// §2.7's error cases (400 key missing, 422 key reused with another payload,
// 409 still being processed) as RFC 9457 problems that carry `instance`,
// `retryable` and `idempotency_key`; the other proxy-made problems carry
// them too, and the raw-socket refusals (no route) stay problem+json on a
// configuration whose profile is another.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { rawRequest } from '../helpers/raw-http.js';
import { sleep } from '../helpers/wait.js';

const YAML = `
defaults:
  tenant: { constant: t }
  maxBodyBytes: 1KiB
routes:
  - name: pay
    match: { path: /pay/** }
    required: true
  - name: stripe-side
    match: { path: /v1/** }
    profile: stripe
`;

const UUID = /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe('profile: ietf — draft-07 §2.7 error handling', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const post = (path: string, key: string | null, body: string, headers: Record<string, string> = {}): Promise<Reply> =>
    send(`${proxy.url}${path}`, { headers: { 'content-type': 'application/json', ...(key === null ? {} : { 'idempotency-key': key }), ...headers }, body });

  function assertProblem(r: Reply, status: number, slug: string, retryable: boolean, key: string | null): Record<string, unknown> {
    assert.equal(r.status, status);
    assert.equal(r.headers['content-type'], 'application/problem+json');
    const b = r.json();
    assert.equal(b.type, `urn:idempotency-proxy:problem:${slug}`);
    assert.equal(b.status, status);
    assert.equal(b.retryable, retryable, `${slug}: retryable`);
    assert.equal(b.instance, `urn:uuid:${b.requestId}`);
    assert.match(b.instance, UUID);
    assert.equal(b.requestId, r.headers['x-request-id']);
    if (key === null) assert.equal('idempotency_key' in b, false, `${slug}: no key was read`);
    else assert.equal(b.idempotency_key, key);
    return b;
  }

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201, 400));
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML });
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('key missing on an operation that requires it: 400, retryable false, no idempotency_key', async () => {
    assertProblem(await post('/pay/a', null, '{}'), 400, 'key-missing', false, null);
  });

  test('key reused with a different payload: 422, retryable false, idempotency_key', async () => {
    assert.equal((await post('/pay/b', 'k-422', '{"amount":1}')).status, 201);
    assertProblem(await post('/pay/b', 'k-422', '{"amount":2}'), 422, 'key-mismatch', false, 'k-422');
  });

  test('retried while the original is still being processed: 409 with Retry-After, retryable true, idempotency_key', async () => {
    const first = post('/pay/c', 'k-409', '{}');
    await sleep(150);
    const dup = await post('/pay/c', 'k-409', '{}');
    assert.equal((await first).status, 201);
    assertProblem(dup, 409, 'in-flight', true, 'k-409');
    assert.match(String(dup.headers['retry-after']), /^[12]$/);
  });

  test('the other proxy-made problems carry the members too: 400 malformed key, 413 body too large (both before a key is read)', async () => {
    assertProblem(await post('/pay/d', 'k'.repeat(256), '{}'), 400, 'key-malformed', false, null);
    assertProblem(await post('/pay/e', 'k-413', 'x'.repeat(2048)), 413, 'body-too-large', false, null);
  });

  test('a client-chosen X-Request-Id that is no UUID: instance names it in a URN of the proxy', async () => {
    const r = await post('/pay/f', null, '{}', { 'x-request-id': 'trace/42' });
    assert.equal(r.json().instance, 'urn:idempotency-proxy:request:trace%2F42');
  });

  test('raw-socket refusals (no route) stay problem+json with the members, next to a stripe route', async () => {
    const r = await rawRequest(proxy.url, 'GET /v1/x HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n');
    assert.equal(r.status, 400);
    assert.equal(r.header('content-type'), 'application/problem+json');
    const b = r.json();
    assert.equal(b.retryable, false);
    assert.match(b.instance, UUID);
    assert.equal(r.header('stripe-should-retry'), undefined);
  });
});
