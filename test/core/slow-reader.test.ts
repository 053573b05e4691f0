import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import net from 'node:net';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startLoggedProxy, type LoggedProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { readRawResponse } from '../helpers/raw-http.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { header, repeatedSha256, uniqueKey } from './support.js';

// A client that reads its response slower than the upstream sends it holds
// the upstream back (backpressure). That wait is the client's: on a keyed
// route upstream.timeout does not count it, so a slow reader never turns an
// answer the upstream gave in time into a stored timeout (an outcome unknown,
// replayed as 504 for ever). And a client that reads nothing at all is cut
// off after the send timeout (src/proxy/slow-client.ts), so that it cannot
// hold an upstream connection, or a keyed exchange, for ever: on a keyed
// route the record is still kept and the retry replays it; on a pass-through
// route the upstream exchange is abandoned.

const UPSTREAM_TIMEOUT_MS = 500;
const SEND_TIMEOUT_MS = 3000;
const BIG = 16 * 1024 * 1024;
const CHUNK = Buffer.alloc(64 * 1024, 9);

const yaml = `
listen: { address: 127.0.0.1:0, http2: true, sendTimeout: ${SEND_TIMEOUT_MS}ms }
upstream: { timeout: ${UPSTREAM_TIMEOUT_MS}ms }
routes:
  - name: open
    match: { path: "/open/**" }
    mode: passthrough
  - name: ref
    match: { path: "/ref/**" }
    record: reference
  - name: kept
    match: { path: "/kept/**" }
    maxStoredResponseBytes: 16MiB
  - name: exports
    match: { path: "/exports/**" }
    maxStoredResponseBytes: 64KiB
`;

interface Sent {
  written: number;
  /** The upstream's response closed before it was complete: the proxy abandoned the exchange. */
  abandoned: boolean;
  done: boolean;
}

describe('a client that reads slowly, or nothing', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let logged: LoggedProxy;
  const sent = new Map<string, Sent>();
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(async (req, _n, res) => {
      if (req.url.startsWith('/ref/')) {
        // A reference route's POST: the resource it made, which a replay GETs (its GET named by its path).
        res.writeHead(201, { 'content-type': 'application/json', location: `/resource/${String(req.headers['x-test-id'])}` });
        res.end('{}');
        return;
      }
      const s: Sent = { written: 0, abandoned: false, done: false };
      sent.set(req.url.startsWith('/resource/') ? req.url.slice('/resource/'.length) : req.headers['x-test-id'] as string, s);
      res.on('close', () => (s.abandoned = !s.done));
      // A releaseOn status (429) on /exports/released: the key is released, the answer relayed unrecorded.
      res.writeHead(req.url.endsWith('/released') ? 429 : 200, { 'content-type': 'application/octet-stream', 'content-length': String(BIG) });
      while (s.written < BIG && !res.destroyed) {
        s.written += CHUNK.length;
        if (!res.write(CHUNK)) await new Promise((r) => res.once('drain', r).once('close', r));
      }
      res.end(() => (s.done = true));
    });
    logged = await startLoggedProxy({
      upstream: upstream.url, databaseUrl: db.url, yaml,
    });
  });
  after(async () => {
    await logged.proxy.close();
    await upstream.close();
    await db.drop();
  });

  /** A POST on a connection that reads nothing yet, once the upstream has begun to answer it. */
  const unreadRequest = async (path: string, id: string, key: string | null): Promise<net.Socket> => {
    const u = new URL(logged.proxy.url);
    const socket = net.connect(Number(u.port), u.hostname);
    socket.on('error', () => {});
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.pause();
    socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nX-Test-Id: ${id}\r\n${key === null ? '' : `Idempotency-Key: ${key}\r\n`}` +
      'Content-Length: 2\r\nConnection: close\r\n\r\n{}');
    await waitFor('the upstream to start sending', () => ((sent.get(id)?.written ?? 0) > 0 ? true : undefined));
    return socket;
  };
  /** An h2c stream whose answer is read only after `pauseMs` (never, if null); what came of it. */
  const h2Request = (session: http2.ClientHttp2Session, path: string, id: string, key: string, pauseMs: number | null) =>
    new Promise<{ status: number; bytes: number; rstCode: number | null }>((resolve) => {
      const st = session.request({ ':method': 'POST', ':path': path, 'idempotency-key': key, 'x-test-id': id, 'content-length': '2' });
      let status = 0;
      let bytes = 0;
      st.on('response', (h) => {
        status = Number(h[':status']);
        st.pause();
        if (pauseMs !== null) setTimeout(() => st.resume(), pauseMs);
      });
      st.on('data', (c: Buffer) => (bytes += c.length));
      st.on('error', () => {});
      st.on('close', () => resolve({ status, bytes, rstCode: st.rstCode ?? null }));
      st.end('{}');
    });

  /** The time the client held the upstream back (about 4 × upstream.timeout) is in the request's time, not in the upstream's. */
  const heldIsNotUpstreamTime = (line: Record<string, unknown>): void => {
    assert.ok(Number(line.ms) >= 4 * UPSTREAM_TIMEOUT_MS, `the request took ${String(line.ms)} ms`);
    assert.ok(Number(line.upstreamMs) <= Number(line.ms) - 3 * UPSTREAM_TIMEOUT_MS, `upstreamMs ${String(line.upstreamMs)} of ms ${String(line.ms)}`);
  };

  const executionsOf = (id: string): number => upstream.received.filter((r) => r.headers['x-test-id'] === id).length;

  /** The key's retry (once its record is committed) replays the upstream's 200; the operation ran once. */
  const retryReplays = async (path: string, id: string, key: string): Promise<void> => {
    const retry = await waitFor('the record to be committed', async () => {
      const r = await send(`${logged.proxy.url}${path}`, { headers: { 'idempotency-key': key, 'x-test-id': id }, body: '{}' });
      return r.status === 409 ? undefined : r;
    }, 5000);
    assert.equal(retry.status, 200, `the replay is the upstream's answer: ${retry.body.toString().slice(0, 300)}`);
    assert.equal(header(retry, 'idempotent-replayed'), 'true');
    assert.equal(executionsOf(id), 1);
  };

  /** An h2c session for `run`, closed after it. */
  const withSession = async <R>(run: (session: http2.ClientHttp2Session) => Promise<R>): Promise<R> => {
    const session = http2.connect(logged.proxy.url);
    session.on('error', () => {});
    try {
      return await run(session);
    } finally {
      session.close();
    }
  };

  test('keyed: a client that reads nothing for longer than upstream.timeout gets every byte, and the record is the answer, not a timeout', async () => {
    const id = uniqueKey('slow');
    const key = uniqueKey('key');
    const socket = await unreadRequest('/exports/slow', id, key);
    await sleep(4 * UPSTREAM_TIMEOUT_MS); // well past upstream.timeout, within the send timeout
    const { head, bytes, sha256 } = await readRawResponse(socket);
    assert.match(head, /^HTTP\/1\.1 200 /);
    assert.equal(bytes, BIG);
    assert.equal(sha256, repeatedSha256(CHUNK, BIG / CHUNK.length));
    await retryReplays('/exports/slow', id, key);
    heldIsNotUpstreamTime(await waitFor('the request line', () => logged.lines.find((l) => l.msg === 'request' && l.path === '/exports/slow' && l.outcome === 'executed')));
  });

  test('keyed: a client that reads nothing is cut off after the send timeout; the exchange runs to its end, the record is kept, the retry replays', async () => {
    const id = uniqueKey('unread');
    const key = uniqueKey('key');
    const socket = await unreadRequest('/exports/unread', id, key);
    // Held back until the proxy cuts the client off; then read to its end, recorded only.
    await waitFor('the upstream to send everything', () => (sent.get(id)!.done ? true : undefined), SEND_TIMEOUT_MS + 10_000);
    const { bytes } = await readRawResponse(socket); // a paused socket sees its reset only once it reads
    assert.ok(bytes < BIG, `the client's response was cut (${bytes} bytes)`);
    await retryReplays('/exports/unread', id, key);
    const line = logged.lines.find((l) => l.msg === 'request' && l.path === '/exports/unread' && l.outcome === 'executed');
    assert.ok(line, 'the first request is logged as executed');
    assert.match(String(line.detail), new RegExp(`read nothing of the response for ${SEND_TIMEOUT_MS} ms`));
    assert.ok(Number(line.ms) >= SEND_TIMEOUT_MS, `not cut before the send timeout (${String(line.ms)} ms)`);
  });

  test('keyed, a releaseOn answer relayed unrecorded: a client that reads nothing for longer than upstream.timeout gets every byte', async () => {
    const id = uniqueKey('released');
    const socket = await unreadRequest('/exports/released', id, uniqueKey('key'));
    await sleep(4 * UPSTREAM_TIMEOUT_MS);
    const { head, bytes } = await readRawResponse(socket);
    assert.match(head, /^HTTP\/1\.1 429 /);
    assert.equal(bytes, BIG);
    const line = await waitFor('the request line', () => logged.lines.find((l) => l.msg === 'request' && l.path === '/exports/released'));
    assert.equal(line.outcome, 'rejected');
  });

  test('pass-through: a client that reads nothing for longer than upstream.timeout gets every byte', async () => {
    const id = uniqueKey('open-slow');
    const socket = await unreadRequest('/open/slow', id, null);
    await sleep(4 * UPSTREAM_TIMEOUT_MS);
    const { head, bytes } = await readRawResponse(socket);
    assert.match(head, /^HTTP\/1\.1 200 /);
    assert.equal(bytes, BIG);
    heldIsNotUpstreamTime(await waitFor('the request line', () => logged.lines.find((l) => l.msg === 'request' && l.path === '/open/slow')));
  });

  test('pass-through: a client that reads nothing is cut off after the send timeout, and the upstream exchange is abandoned', async () => {
    const id = uniqueKey('open-unread');
    const socket = await unreadRequest('/open/unread', id, null);
    await waitFor('the upstream exchange to be abandoned', () => (sent.get(id)!.abandoned ? true : undefined), SEND_TIMEOUT_MS + 5000);
    assert.ok(sent.get(id)!.written < BIG, 'the upstream was held back, not read to its end');
    const { bytes } = await readRawResponse(socket);
    assert.ok(bytes < BIG, `the client's response was cut (${bytes} bytes)`);
    const line = await waitFor('the request line', () => logged.lines.find((l) => l.msg === 'request' && l.path === '/open/unread'));
    assert.equal(line.outcome, 'passthrough', 'the client\'s doing, not an upstream error');
    assert.match(String(line.detail), new RegExp(`the client read nothing of the response for ${SEND_TIMEOUT_MS} ms`));
    assert.ok(Number(line.ms) >= SEND_TIMEOUT_MS, `not cut before the send timeout (${String(line.ms)} ms)`);
  });

  test('keyed, over HTTP/2: a stream that reads nothing for longer than upstream.timeout gets every byte, and the retry replays the answer', async () => {
    const id = uniqueKey('h2-slow');
    const key = uniqueKey('key');
    const got = await withSession((session) => h2Request(session, '/exports/h2-slow', id, key, 4 * UPSTREAM_TIMEOUT_MS));
    assert.deepEqual(got, { status: 200, bytes: BIG, rstCode: 0 });
    await retryReplays('/exports/h2-slow', id, key);
  });

  test('keyed, over HTTP/2: a stream that reads nothing is reset after the send timeout (INTERNAL_ERROR); the record is kept, the retry replays', async () => {
    const id = uniqueKey('h2-unread');
    const key = uniqueKey('key');
    const got = await withSession((session) => h2Request(session, '/exports/h2-unread', id, key, null));
    assert.equal(got.status, 200);
    assert.ok(got.bytes < BIG, `cut (${got.bytes} bytes)`);
    assert.equal(got.rstCode, http2.constants.NGHTTP2_INTERNAL_ERROR);
    await waitFor('the upstream to send everything', () => (sent.get(id)!.done ? true : undefined), 10_000);
    await retryReplays('/exports/h2-unread', id, key);
  });

  test('a replay that its client reads nothing of is cut after the send timeout (Node would hold its unsent bytes as long as the client stayed)', async () => {
    const id = uniqueKey('replay');
    const key = uniqueKey('key');
    const first = await send(`${logged.proxy.url}/kept/replay`, { headers: { 'idempotency-key': key, 'x-test-id': id }, body: '{}' });
    assert.equal(first.status, 200);
    assert.equal(first.body.length, BIG);
    const u = new URL(logged.proxy.url);
    const socket = net.connect(Number(u.port), u.hostname);
    socket.on('error', () => {});
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.pause();
    socket.write(`POST /kept/replay HTTP/1.1\r\nHost: x\r\nX-Test-Id: ${id}\r\nIdempotency-Key: ${key}\r\nContent-Length: 2\r\n\r\n{}`);
    const line = await waitFor('the replay', () => logged.lines.find((l) => l.msg === 'request' && l.path === '/kept/replay' && l.outcome === 'replayed'));
    assert.equal(line.status, 200);
    await sleep(SEND_TIMEOUT_MS + 1500);
    const { head, bytes } = await readRawResponse(socket); // a paused socket sees its reset only once it reads
    assert.match(head, /^HTTP\/1\.1 200 /);
    assert.match(head, /idempotent-replayed: true/i);
    assert.ok(bytes < BIG, `the replay was cut (${bytes} of ${BIG} bytes)`);
    assert.equal(executionsOf(id), 1);
  });

  test('a reference replay that its client reads nothing of is cut after the send timeout, and its GET abandoned', async () => {
    const id = uniqueKey('ref');
    const key = uniqueKey('key');
    const first = await send(`${logged.proxy.url}/ref/orders`, { headers: { 'idempotency-key': key, 'x-test-id': id }, body: '{}' });
    assert.equal(first.status, 201);
    const socket = await unreadRequest('/ref/orders', id, key); // the replay: GET /resource/<id> relayed
    await waitFor('the GET to be abandoned', () => (sent.get(id)!.abandoned ? true : undefined), SEND_TIMEOUT_MS + 5000);
    const { head, bytes } = await readRawResponse(socket);
    assert.match(head, /^HTTP\/1\.1 201 /);
    assert.ok(bytes < BIG, `the replay was cut (${bytes} bytes)`);
    const line = await waitFor('the replay\'s line', () => logged.lines.find((l) => l.msg === 'request' && l.path === '/ref/orders' && l.outcome === 'replayed'));
    assert.match(String(line.detail), new RegExp(`the client read nothing of the reference replay for ${SEND_TIMEOUT_MS} ms`));
    assert.equal(upstream.received.filter((r) => r.method === 'POST' && r.headers['x-test-id'] === id).length, 1);
  });
});
