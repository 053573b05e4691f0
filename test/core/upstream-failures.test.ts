import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import net from 'node:net';
import { Agent, request } from 'undici';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { closedPort, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { assertProblem, header, uniqueKey } from './support.js';
import { waitFor } from '../helpers/wait.js';

// docs/contract.md, Answers: upstream connection refused → 502 and the key released (the
// request never reached the upstream); upstream timeout / reset after the
// request was sent → 504 / 502, stored per onUnknownOutcome (default store:
// the retry gets the same answer, the operation never runs twice silently).

/** Waits ms or until the response's connection goes, whichever is first. */
const stall = (res: ServerResponse, ms: number): Promise<void> => new Promise((resolve) => {
  const t = setTimeout(resolve, ms).unref();
  res.once('close', () => { clearTimeout(t); resolve(); });
});

const yaml = `
upstream: { timeout: 500ms }
routes:
  - name: releasing
    match: { path: "/release/**" }
    onUnknownOutcome: release
  - name: through
    match: { path: "/through/**" }
    mode: passthrough
  - name: rest
    match: { path: "/**" }
`;

describe('upstream failures', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const seen = new Map<string, number>();
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(async (req, n, res) => {
      const key = String(req.headers['idempotency-key']);
      seen.set(key, (seen.get(key) ?? 0) + 1);
      const mode = req.url.split('/').pop();
      if (mode === 'slow' && seen.get(key) === 1) {
        await stall(res, 2000);
        if (res.destroyed) return;
      }
      if (mode === 'reset' && seen.get(key) === 1) {
        res.socket!.destroy();
        return;
      }
      if (mode === 'bighead' || mode === 'hugehead') {
        // A header section of 20 KiB (over Node's default 16 KiB) or 40 KiB (over the 32 KiB the proxy reads).
        res.writeHead(201, { 'content-type': 'application/json', 'x-big': 'h'.repeat(mode === 'bighead' ? 20 * 1024 : 40 * 1024) });
        res.end(JSON.stringify({ execution: n, key }));
        return;
      }
      if (mode === 'garbage') {
        res.socket!.end('HTTP/1.1 20X Created\r\n\r\n');
        return;
      }
      if (mode === 'halfchunked') {
        // No Content-Length: to an HTTP/1.0 client the proxy can frame this body only by closing the connection.
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('only part of it');
        setTimeout(() => res.socket!.destroy(), 20);
        return;
      }
      if (mode === 'halfbody' && seen.get(key) === 1) {
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '100' });
        res.write('only part of it');
        setTimeout(() => res.socket!.destroy(), 20);
        return;
      }
      if (mode === 'slowbody' && seen.get(key) === 1) {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('started…');
        await stall(res, 2000);
        if (!res.destroyed) res.end('done');
        return;
      }
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ execution: n, key }));
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  const post = (p: RunningProxy, path: string, key: string) => send(`${p.url}${path}`, { headers: { 'idempotency-key': key }, body: 'op' });
  const rows = async (key: string) => sql<{ state: string; status_code: number | null }>(db.url,
    'SELECT state, status_code FROM idempotency_keys WHERE idem_key = $1', [key]);

  /** The client's connection is cut before the record is committed: retry until the key settles. */
  const settled = (key: string, path: string) => waitFor(`${key} to settle`, async () => {
    const r = await post(proxy, path, key);
    return r.status === 409 ? undefined : r;
  }, 3000, 50);

  test('connection refused → 502 upstream-unreachable, key released; a proxy with a live upstream runs the same key', async () => {
    const dead = await startTestProxy({ upstream: `http://127.0.0.1:${await closedPort()}`, databaseUrl: db.url, yaml });
    try {
      const key = uniqueKey('refused');
      assertProblem(await post(dead, '/pay/ok', key), 'upstream-unreachable', 502);
      assert.deepEqual(await rows(key), [], 'released: no row');
      assertProblem(await post(dead, '/pay/ok', key), 'upstream-unreachable', 502); // again: not a replay
      const live = await post(proxy, '/pay/ok', key);
      assert.equal(live.status, 201);
      assert.equal(live.headers['idempotent-replayed'], undefined);
      assert.equal(seen.get(key), 1);
    } finally {
      await dead.close();
    }
  });

  test('timeout (500ms, upstream takes 2s) → 504 stored; the retry gets the same 504 replayed', async () => {
    const key = uniqueKey('timeout');
    const t0 = Date.now();
    const first = await post(proxy, '/pay/slow', key);
    assert.ok(Date.now() - t0 < 1800, 'answered at the timeout, not when the upstream finished');
    const p = assertProblem(first, 'upstream-timeout', 504);
    const retry = await post(proxy, '/pay/slow', key);
    assert.equal(retry.status, 504);
    assert.equal(header(retry, 'idempotent-replayed'), 'true');
    assert.ok(retry.body.equals(first.body), 'the same problem body, byte for byte');
    assert.equal(JSON.parse(retry.body.toString()).requestId, p.requestId);
    assert.equal(seen.get(key), 1, 'the upstream saw exactly one request');
    assert.deepEqual(await rows(key), [{ state: 'complete', status_code: 504 }]);
  });

  test('onUnknownOutcome: release — timeout → 504, the retry runs again', async () => {
    const key = uniqueKey('timeout-release');
    assertProblem(await post(proxy, '/release/slow', key), 'upstream-timeout', 504);
    assert.deepEqual(await rows(key), []);
    const retry = await post(proxy, '/release/slow', key);
    assert.equal(retry.status, 201);
    assert.equal(seen.get(key), 2);
  });

  test('connection reset after the request was sent → 502 upstream-reset, stored', async () => {
    const key = uniqueKey('reset');
    const first = await post(proxy, '/pay/reset', key);
    assertProblem(first, 'upstream-reset', 502);
    const retry = await post(proxy, '/pay/reset', key);
    assert.equal(retry.status, 502);
    assert.equal(header(retry, 'idempotent-replayed'), 'true');
    assert.equal(seen.get(key), 1);
  });

  test('the body breaks off after the headers → the client sees a broken response; the retry gets a stored 502', async () => {
    const key = uniqueKey('halfbody');
    await assert.rejects(post(proxy, '/pay/halfbody', key), 'an incomplete response is never presented as complete');
    const retry = await settled(key, '/pay/halfbody');
    assertProblem(retry, 'upstream-reset', 502);
    assert.equal(header(retry, 'idempotent-replayed'), 'true');
    assert.equal(seen.get(key), 1);
  });

  test('the timeout strikes while the body streams → the retry gets a stored 504', async () => {
    const key = uniqueKey('slowbody');
    await assert.rejects(post(proxy, '/pay/slowbody', key));
    const retry = await settled(key, '/pay/slowbody');
    assertProblem(retry, 'upstream-timeout', 504);
    assert.equal(header(retry, 'idempotent-replayed'), 'true');
    assert.equal(seen.get(key), 1);
  });

  test('an upstream header section of 20 KiB is relayed and replayed; one over 32 KiB is a stored 502 that says why', async () => {
    // The test's own client reads up to 64 KiB of headers (undici's default, like Node's, is 16 KiB).
    const client = new Agent({ maxHeaderSize: 64 * 1024 });
    const big = (key: string) => request(`${proxy.url}/pay/bighead`, { method: 'POST', headers: { 'idempotency-key': key }, body: 'op', dispatcher: client });
    try {
      const key = uniqueKey('bighead');
      const first = await big(key);
      await first.body.text();
      assert.equal(first.statusCode, 201);
      assert.equal(String(first.headers['x-big']).length, 20 * 1024);
      const again = await big(key);
      await again.body.text();
      assert.equal(again.headers['idempotent-replayed'], 'true');
      assert.equal(String(again.headers['x-big']).length, 20 * 1024, 'the replay carries the header as stored');
      assert.equal(seen.get(key), 1);
    } finally {
      await client.close();
    }
    const key = uniqueKey('hugehead');
    const p = assertProblem(await post(proxy, '/pay/hugehead', key), 'upstream-reset', 502);
    assert.match(p.detail, /response header section is larger than the 32768 bytes the proxy reads \(UND_ERR_HEADERS_OVERFLOW\)/);
    const retry = await post(proxy, '/pay/hugehead', key);
    assert.equal(retry.status, 502);
    assert.equal(header(retry, 'idempotent-replayed'), 'true', 'the upstream ran: its outcome is unknown, stored, never run again');
    assert.equal(seen.get(key), 1);
  });

  test('an upstream answer that is not HTTP → a stored 502 that says so', async () => {
    const key = uniqueKey('garbage');
    const p = assertProblem(await post(proxy, '/pay/garbage', key), 'upstream-reset', 502);
    assert.match(p.detail, /the upstream's response is not valid HTTP\/1\.1 \(Response does not match the HTTP\/1\.1 protocol/);
    const retry = await post(proxy, '/pay/garbage', key);
    assert.equal(header(retry, 'idempotent-replayed'), 'true');
    assert.equal(seen.get(key), 1);
  });

  // Node frames a body of unknown length for an HTTP/1.0 client by closing the connection: a FIN would end the cut
  // body as if it were whole. The proxy resets the connection instead.
  for (const [name, path] of [['a keyed route', '/pay/halfchunked'], ['a pass-through route', '/through/halfchunked']] as const) {
    test(`the body breaks off on ${name}, to an HTTP/1.0 client: the connection is reset, never closed as if the body were whole`, async () => {
      const u = new URL(proxy.url);
      const socket = net.connect(Number(u.port), u.hostname);
      let received = '';
      socket.on('data', (d: Buffer) => { received += d.toString('latin1'); });
      const how = await new Promise<string>((resolve) => {
        socket.on('error', (err: NodeJS.ErrnoException) => resolve(`error ${err.code}`));
        socket.on('end', () => resolve('end (FIN)'));
        socket.write(`POST ${path} HTTP/1.0\r\nidempotency-key: ${uniqueKey('http10')}\r\ncontent-length: 2\r\n\r\nop`);
      });
      socket.destroy();
      assert.equal(how, 'error ECONNRESET', `a reset, not a clean close (received ${JSON.stringify(received.slice(0, 120))})`);
    });
  }
});
