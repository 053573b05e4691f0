import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type Received, type TestUpstream } from '../helpers/upstream.js';
import { uniqueKey } from './support.js';
import { rawRequest } from '../helpers/raw-http.js';

// docs/contract.md, step 1 (route): unmatched requests, mode: passthrough routes, methods outside the
// route's `methods` and unkeyed requests on non-required routes are
// forwarded untouched — headers (the key header included) and body — with
// X-Forwarded-* added and hop-by-hop headers removed. The key header also
// reaches the upstream on idempotent routes.

const yaml = `
routes:
  - name: pay
    match: { path: "/pay/**" }
  - name: static
    match: { path: "/static/**" }
    mode: passthrough
`;

const HOP = ['connection', 'keep-alive', 'te', 'upgrade', 'proxy-authorization', 'proxy-connection', 'x-hop-named', 'trailer'];

describe('pass-through and forwarding', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream((req, n, res) => {
      res.writeHead(200, {
        'content-type': 'text/plain', 'x-upstream': String(n), connection: 'keep-alive, x-resp-hop',
        'x-resp-hop': 'must not reach the client', 'keep-alive': 'timeout=5',
      });
      res.end(`seen ${req.method} ${req.url}`);
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  const last = (): Received => upstream.received[upstream.received.length - 1]!;
  const rowCount = async (): Promise<number> => Number((await sql<{ n: string }>(db.url, 'SELECT count(*) AS n FROM idempotency_keys'))[0]!.n);

  /** A request with end-to-end headers, hop-by-hop ones and the key, sent raw. */
  async function forward(method: string, path: string, key: string, body: string): Promise<{ got: Received; reply: Awaited<ReturnType<typeof rawRequest>> }> {
    const n = upstream.executions();
    const reply = await rawRequest(proxy.url, [
      `${method} ${path} HTTP/1.1`,
      'Host: shop.example:8443',
      'Connection: close, X-Hop-Named',
      'X-Hop-Named: hop value',
      'Keep-Alive: timeout=5',
      'TE: trailers',
      'Trailer: X-Checksum',
      'Upgrade: h2c',
      'Proxy-Authorization: Basic cHJveHk6c2VjcmV0',
      'Proxy-Connection: keep-alive',
      `Idempotency-Key: ${key}`,
      'X-Custom: one',
      'X-Custom: two',
      'X-Forwarded-For: 203.0.113.9',
      'Content-Type: application/json',
      `Content-Length: ${Buffer.byteLength(body)}`,
      '',
      body,
    ].join('\r\n'));
    assert.equal(upstream.executions(), n + 1, 'forwarded once');
    return { got: last(), reply };
  }

  function assertForwardedUntouched(got: Received, method: string, path: string, key: string, body: string): void {
    assert.equal(got.method, method);
    assert.equal(got.url, path);
    assert.equal(got.body.toString(), body);
    assert.equal(got.headers['idempotency-key'], key, 'the key header reaches the upstream');
    assert.equal(got.headers['content-type'], 'application/json');
    assert.equal(got.headers.host, 'shop.example:8443', 'Host is passed on');
    const custom = got.rawHeaders.filter((_, i) => i % 2 === 1 && got.rawHeaders[i - 1]!.toLowerCase() === 'x-custom');
    assert.deepEqual(custom, ['one', 'two'], 'repeated headers stay repeated, in order');
    for (const h of HOP) {
      if (h === 'connection') continue; // undici manages its own connection header
      assert.equal(got.headers[h], undefined, `${h} is hop-by-hop`);
    }
    assert.ok(got.headers.connection === undefined || got.headers.connection === 'keep-alive', `connection: ${got.headers.connection}`);
    assert.equal(got.headers['x-forwarded-for'], '203.0.113.9, 127.0.0.1');
    assert.equal(got.headers['x-forwarded-proto'], 'http');
    assert.equal(got.headers['x-forwarded-host'], 'shop.example:8443');
  }

  test('an unmatched path is forwarded untouched and binds nothing', async () => {
    const before = await rowCount();
    const key = uniqueKey('unmatched');
    const { got, reply } = await forward('POST', '/elsewhere/x?q=1', key, '{"a":1}');
    assertForwardedUntouched(got, 'POST', '/elsewhere/x?q=1', key, '{"a":1}');
    assert.equal(reply.status, 200);
    assert.equal(reply.header('x-upstream'), String(upstream.executions()));
    assert.equal(reply.header('x-resp-hop'), undefined, 'response headers named in Connection are dropped');
    assert.equal(reply.header('keep-alive'), undefined);
    assert.equal(await rowCount(), before);
    // The same key again: forwarded again (no deduplication).
    await forward('POST', '/elsewhere/x?q=1', key, '{"a":1}');
  });

  test('a mode: passthrough route is forwarded untouched', async () => {
    const before = await rowCount();
    const key = uniqueKey('static');
    const { got } = await forward('POST', '/static/a', key, '{"b":2}');
    assertForwardedUntouched(got, 'POST', '/static/a', key, '{"b":2}');
    await forward('POST', '/static/a', key, '{"b":2}');
    assert.equal(await rowCount(), before);
  });

  test('GET (not in methods) on an idempotent route is forwarded untouched', async () => {
    const before = await rowCount();
    const key = uniqueKey('get');
    const { got } = await forward('GET', '/pay/status', key, '');
    assertForwardedUntouched(got, 'GET', '/pay/status', key, '');
    await forward('GET', '/pay/status', key, '');
    assert.equal(await rowCount(), before);
  });

  test('a keyed route without a key (not required) is forwarded without deduplication', async () => {
    const before = await rowCount();
    const n = upstream.executions();
    const opts = { headers: { 'content-type': 'application/json', 'x-custom': 'v' }, body: '{"c":3}' };
    const [a, b] = await Promise.all([send(`${proxy.url}/pay/x`, opts), send(`${proxy.url}/pay/x`, opts)]);
    assert.equal(a.status, 200);
    assert.equal(b.status, 200);
    assert.equal(upstream.executions(), n + 2);
    assert.equal(last().body.toString(), '{"c":3}');
    assert.equal(last().headers['x-custom'], 'v');
    assert.equal(last().headers['x-forwarded-proto'], 'http');
    assert.equal(await rowCount(), before);
  });

  test('on an idempotent route the key, headers and body reach the upstream; hop-by-hop do not', async () => {
    const key = uniqueKey('keyed');
    const { got, reply } = await forward('POST', '/pay/charge', key, '{"d":4}');
    assertForwardedUntouched(got, 'POST', '/pay/charge', key, '{"d":4}');
    assert.equal(reply.header('x-resp-hop'), undefined);
    assert.equal(await rowCount() > 0, true, 'this one was claimed');
    // The stored record has no hop-by-hop headers either.
    const [row] = await sql<{ response_headers: Array<[string, string]> }>(db.url,
      'SELECT response_headers FROM idempotency_keys WHERE idem_key = $1', [key]);
    const names = row!.response_headers.map(([n]) => n);
    for (const h of ['connection', 'keep-alive', 'x-resp-hop', 'transfer-encoding']) assert.ok(!names.includes(h), `${h} stored`);
  });

  test('Expect: 100-continue (curl, .NET, Java clients) is answered by the proxy, not passed on', async () => {
    for (const [path, key] of [['/pay/expect', uniqueKey('expect')], ['/elsewhere/expect', uniqueKey('expect-pt')]] as const) {
      const n = upstream.executions();
      const body = '{"e":5}';
      const reply = await rawRequest(proxy.url, [
        `POST ${path} HTTP/1.1`, 'Host: x', 'Connection: close', 'Expect: 100-continue', `Idempotency-Key: ${key}`,
        `Content-Length: ${body.length}`, '', body,
      ].join('\r\n'));
      assert.equal(reply.status, 200, `${path}: ${reply.body.toString()}`);
      assert.equal(upstream.executions(), n + 1);
      assert.equal(last().headers.expect, undefined);
      assert.equal(last().body.toString(), body);
    }
  });

  test('a chunked body on a pass-through path is streamed through', async () => {
    const n = upstream.executions();
    const reply = await rawRequest(proxy.url,
      'POST /elsewhere/stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n');
    assert.equal(reply.status, 200);
    assert.equal(upstream.executions(), n + 1);
    assert.equal(last().body.toString(), 'abcdefg');
  });
});
