import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { assertProblem, uniqueKey } from '../core/support.js';
import { rawRequest } from '../helpers/raw-http.js';

// docs/problems.md: every problem the proxy answers carries Cache-Control:
// no-store and X-Request-Id — also the 502/504 it stores as a key's record
// (its first answer and every replay) and the refusals written raw on a
// socket Node's HTTP parser refused, or on a CONNECT.

describe('Cache-Control: no-store on every proxy-made problem', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(() => {}); // never answers: upstream.timeout decides
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: 'upstream: { timeout: 300ms }\nroutes: [{ name: pay, match: { path: "/**" } }]\n' });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  test('a stored 504 problem record, answered first and then replayed', async () => {
    const key = uniqueKey('ns');
    const first = await send(`${proxy.url}/pay`, { headers: { 'idempotency-key': key }, body: '{}' });
    assertProblem(first, 'upstream-timeout', 504);
    assert.equal(first.headers['cache-control'], 'no-store');
    assert.equal(typeof first.headers['x-request-id'], 'string');
    const replay = await send(`${proxy.url}/pay`, { headers: { 'idempotency-key': key }, body: '{}' });
    assertProblem(replay, 'upstream-timeout', 504);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.equal(replay.headers['cache-control'], 'no-store');
  });

  test('refusals written on the raw socket: a request the parser refuses, and CONNECT', async () => {
    const bad = await rawRequest(proxy.url, 'GET /x HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n');
    assert.equal(bad.status, 400);
    assert.equal(bad.header('cache-control'), 'no-store');
    assert.equal(bad.header('connection'), 'close');
    const connect = await rawRequest(proxy.url, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
    assert.equal(connect.status, 405);
    assert.equal(connect.header('cache-control'), 'no-store');
  });
});
