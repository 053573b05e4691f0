// TLS and HTTP/2 on the listener (docs/configuration.md, Listener): real
// certificates from a private CA made with openssl, real clients (curl, Node's
// https and http2), a real upstream and PostgreSQL. HTTP/2 over TLS (ALPN),
// h2c with prior knowledge in clear text, and HTTP/1.1 on the same port;
// concurrent streams on one connection are separate requests.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type http2 from 'node:http2';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { uniqueKey } from '../core/support.js';
import { createPki, type Pki } from './certs.js';
import { curl, h2Connect, h2Request, httpsRequest, type Answer } from './clients.js';

let db: TestDatabase;
let pki: Pki;
let upstream: TestUpstream;
let server: { cert: string; key: string };

const ROUTES = `
routes:
  - name: pay
    match: { path: /pay/** }
    tenant: { constant: t }
    onInFlight: wait
    waitTimeout: 20s
  - name: through
    match: { path: /through/** }
    mode: passthrough
`;

before(async () => {
  db = await createTestDatabase();
  pki = createPki();
  server = pki.issue('server', '/CN=localhost', { san: 'DNS:localhost,IP:127.0.0.1' });
  upstream = await startUpstream(async (req, n, res) => {
    if (req.url.endsWith('/break')) {
      // The body breaks off after the status line: the upstream's connection dies mid-response.
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('the first part of the body');
      setTimeout(() => res.socket!.destroy(), 20);
      return;
    }
    if (req.url.endsWith('/drip')) {
      // A body that takes 3 s: still streaming when a short shutdown deadline passes.
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('the first part of the body');
      const t = setTimeout(() => res.end('the rest'), 3000);
      res.once('close', () => clearTimeout(t));
      return;
    }
    const delay = Number(/delay=(\d+)/.exec(req.url)?.[1] ?? 0);
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    const body = JSON.stringify({ execution: n, proto: req.headers['x-forwarded-proto'], host: req.headers.host, body: req.body.toString(), cookie: req.rawHeaders.filter((_, i) => i % 2 === 0 ? false : req.rawHeaders[i - 1]!.toLowerCase() === 'cookie') });
    res.writeHead(201, { 'content-type': 'application/json', 'x-upstream-execution': String(n), 'set-cookie': 'a=1', 'x-multi': ['one', 'two'] });
    res.end(body);
  });
});

after(async () => {
  await upstream?.close();
  await db?.drop();
  pki?.remove();
});

const stable = (a: Answer): Record<string, unknown> => {
  // Per response (date, request id), never stored (set-cookie), or recomputed (content-length).
  const { date: _d, 'x-request-id': _r, 'idempotent-replayed': _i, 'set-cookie': _c, 'content-length': _l, ...rest } = a.headers;
  return rest;
};

/** 50 streams with one key on one HTTP/2 connection, fired at once: one execution, 49 byte-identical replays. */
async function fiftyStreams(session: http2.ClientHttp2Session, authority: string): Promise<void> {
  const key = uniqueKey('h2-50');
  const before = upstream.executions();
  const answers = await Promise.all(Array.from({ length: 50 }, () =>
    h2Request(session, '/pay/fifty?delay=300', { 'idempotency-key': key, 'content-type': 'application/json', ':authority': authority }, '{"amount":50}')));
  assert.equal(upstream.executions() - before, 1, 'one execution for 50 duplicate streams');
  const originals = answers.filter((a) => a.headers['idempotent-replayed'] === undefined);
  const replays = answers.filter((a) => a.headers['idempotent-replayed'] === 'true');
  assert.equal(originals.length, 1, `one original answer (statuses ${answers.map((a) => a.status).join(',')})`);
  assert.equal(replays.length, 49);
  const first = originals[0]!;
  assert.equal(first.status, 201);
  for (const r of replays) {
    assert.equal(r.status, 201);
    assert.ok(r.body.equals(first.body), 'replay body byte-identical');
    assert.deepEqual(stable(r), stable(first), 'replay headers as stored');
  }
  // One more after the fact: a replay over HTTP/2 too.
  const late = await h2Request(session, '/pay/fifty?delay=300', { 'idempotency-key': key, 'content-type': 'application/json' }, '{"amount":50}');
  assert.equal(late.headers['idempotent-replayed'], 'true');
  assert.ok(late.body.equals(first.body));
}

describe('TLS listener with http2: true', () => {
  let proxy: RunningProxy;
  let port: number;
  before(async () => {
    proxy = await startTestProxy({
      upstream: upstream.url,
      databaseUrl: db.url,
      yaml: `listen: { address: 127.0.0.1:0, tls: { cert: ${server.cert}, key: ${server.key} }, http2: true }\n${ROUTES}`,
    });
    port = Number(new URL(proxy.url).port);
    assert.match(proxy.url, /^https:\/\//);
  });
  after(() => proxy.close());

  test('curl --http2 negotiates h2 by ALPN: one execution, then a byte-identical replay over h2', async () => {
    const key = uniqueKey('curl-h2');
    const args = ['--http2', '--cacert', pki.caFile, '-H', `Idempotency-Key: ${key}`, '-H', 'Cookie: a=1', '-H', 'Cookie: b=2', '--data-binary', 'hello', `https://localhost:${port}/pay/c`];
    const before = upstream.executions();
    const first = await curl(args);
    assert.equal(first.code, 0, first.stderr);
    assert.equal(first.httpVersion, '2');
    assert.equal(first.status, 201);
    const j = JSON.parse(first.body);
    assert.equal(j.proto, 'https', 'X-Forwarded-Proto: https');
    assert.equal(j.host, `localhost:${port}`, ':authority went upstream as Host');
    assert.equal(j.body, 'hello');
    assert.deepEqual(j.cookie, ['a=1; b=2'], 'cookie fields joined into one line for HTTP/1.1 (RFC 9113 §8.2.3)');
    const second = await curl(args);
    assert.equal(second.httpVersion, '2');
    assert.match(second.headers, /idempotent-replayed: true/i);
    assert.equal(second.body, first.body, 'replay byte-identical');
    assert.equal(upstream.executions() - before, 1);
  });

  test('curl --http1.1 on the same port is served HTTP/1.1', async () => {
    const r = await curl(['--http1.1', '--cacert', pki.caFile, '-H', `Idempotency-Key: ${uniqueKey('curl-h1')}`, '--data-binary', 'x', `https://localhost:${port}/pay/h1`]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.httpVersion, '1.1');
    assert.equal(r.status, 201);
    assert.equal(JSON.parse(r.body).proto, 'https');
  });

  test("Node's https client: one execution, then a replay", async () => {
    const key = uniqueKey('https');
    const opts = { ca: pki.ca, headers: { 'idempotency-key': key }, body: 'node' };
    const a = await httpsRequest(`https://localhost:${port}/pay/n`, opts);
    const b = await httpsRequest(`https://localhost:${port}/pay/n`, opts);
    assert.equal(a.httpVersion, '1.1');
    assert.equal(a.status, 201);
    assert.equal(b.headers['idempotent-replayed'], 'true');
    assert.ok(a.body.equals(b.body));
    assert.equal(a.peer?.subject.CN, 'localhost');
  });

  test('a client that does not trust the private CA is refused', async () => {
    await assert.rejects(httpsRequest(`https://localhost:${port}/pay/n`, { body: 'x' }), /self-signed|unable to (get|verify)/i);
  });

  test("Node's http2 client: 50 duplicate streams on one connection execute once; replays byte-identical", async () => {
    const session = await h2Connect(`https://localhost:${port}`, { ca: pki.ca });
    try {
      assert.equal(session.alpnProtocol, 'h2');
      await fiftyStreams(session, `localhost:${port}`);
    } finally {
      session.close();
    }
  });

  test('problems over h2 carry no connection-specific header; the session stays usable', async () => {
    const session = await h2Connect(`https://localhost:${port}`, { ca: pki.ca });
    // Node drops a Connection header on HTTP/2 with an UnsupportedWarning: the proxy must not write one.
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    try {
      const bad = await h2Request(session, '/pay/../x', {});
      assert.equal(bad.status, 400);
      assert.equal(bad.headers.connection, undefined);
      assert.equal(JSON.parse(bad.body.toString()).status, 400);
      const mismatch = await h2Request(session, '/pay/m', { ':authority': `localhost:${port}`, host: 'elsewhere.example' });
      assert.equal(mismatch.status, 400, ':authority and Host differ');
      const ok = await h2Request(session, '/pay/after', { 'idempotency-key': uniqueKey('after') }, 'x');
      assert.equal(ok.status, 201);
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(warnings, []);
    } finally {
      process.off('warning', onWarning);
      session.close();
    }
  });
});

describe('clear text with http2: true (h2c with prior knowledge beside HTTP/1.1)', () => {
  let proxy: RunningProxy;
  before(async () => {
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: `listen: { address: 127.0.0.1:0, http2: true }\n${ROUTES}` });
    assert.match(proxy.url, /^http:\/\//);
  });
  after(() => proxy.close());

  test('curl --http2-prior-knowledge and plain HTTP/1.1 on the same port', async () => {
    const key = uniqueKey('h2c');
    const h2 = await curl(['--http2-prior-knowledge', '-H', `Idempotency-Key: ${key}`, '--data-binary', 'c', `${proxy.url}/pay/c`]);
    assert.equal(h2.code, 0, h2.stderr);
    assert.equal(h2.httpVersion, '2');
    assert.equal(h2.status, 201);
    assert.equal(JSON.parse(h2.body).proto, 'http');
    const h1 = await curl(['--http1.1', '-H', `Idempotency-Key: ${key}`, '--data-binary', 'c', `${proxy.url}/pay/c`]);
    assert.equal(h1.httpVersion, '1.1');
    assert.match(h1.headers, /idempotent-replayed: true/i, 'the HTTP/1.1 retry replays what HTTP/2 stored');
    assert.equal(h1.body, h2.body);
  });

  test('a request body without content-length (ends with the stream) is forwarded and fingerprinted', async () => {
    const session = await h2Connect(proxy.url);
    try {
      const key = uniqueKey('nolen');
      const a = await h2Request(session, '/pay/nolen', { 'idempotency-key': key }, 'streamed body');
      assert.equal(a.status, 201);
      assert.equal(JSON.parse(a.body.toString()).body, 'streamed body');
      const other = await h2Request(session, '/pay/nolen', { 'idempotency-key': key }, 'another body');
      assert.equal(other.status, 422, 'same key, different body: a mismatch');
    } finally {
      session.close();
    }
  });

  test('a header list over 32 KiB gets the 431 problem, not a reset stream; the session stays usable', async () => {
    const session = await h2Connect(proxy.url);
    try {
      await new Promise((r) => session.once('remoteSettings', r)); // the client heeds what the proxy advertises
      assert.equal(session.remoteSettings.maxHeaderListSize, 64 * 1024);
      const key = uniqueKey('big');
      const big = await h2Request(session, '/pay/big', { 'idempotency-key': key, 'x-big': 'a'.repeat(40 * 1024) }, 'b');
      assert.equal(big.status, 431);
      assert.equal(JSON.parse(big.body.toString()).type, 'urn:idempotency-proxy:problem:headers-too-large');
      assert.equal(big.headers['cache-control'], 'no-store');
      // Many small fields: the size decides, not nghttp2's count of pairs (which resets the stream).
      const many = Object.fromEntries(Array.from({ length: 1200 }, (_, i) => [`x-f${i}`, 'v']));
      const count = await h2Request(session, '/pay/many', { 'idempotency-key': key, ...many }, 'b');
      assert.equal(count.status, 431);
      const ok = await h2Request(session, '/pay/big', { 'idempotency-key': key, 'x-big': 'a'.repeat(8 * 1024) }, 'b'); // the test upstream (node:http) takes 16 KiB
      assert.equal(ok.status, 201, `the key was never claimed by the refused requests: ${ok.body.toString()}`);
      assert.equal(ok.headers['idempotent-replayed'], undefined);
    } finally {
      session.close();
    }
  });

  // A response cut after its status line must read as broken, never as complete. Over HTTP/2 the stream is reset with
  // INTERNAL_ERROR: a reset with NO_ERROR (what destroying a stream sends) ends Node's client stream as if it were whole.
  for (const [name, path] of [['a keyed route', '/pay/break'], ['a pass-through route', '/through/break']] as const) {
    test(`an upstream that dies mid-body on ${name}: the stream is reset with INTERNAL_ERROR; curl sees the stream not closed cleanly`, async () => {
      const session = await h2Connect(proxy.url);
      try {
        const stream = session.request({ ':method': 'POST', ':path': path, 'idempotency-key': uniqueKey('h2-break') });
        stream.end('b');
        stream.resume();
        const outcome = await new Promise<string>((resolve) => {
          stream.once('error', (err: NodeJS.ErrnoException) => resolve(`error ${err.code}`));
          stream.once('end', () => resolve('end'));
        });
        assert.equal(outcome, 'error ERR_HTTP2_STREAM_ERROR', 'an incomplete response is never presented as complete');
        assert.equal(stream.rstCode, 2, 'RST_STREAM with INTERNAL_ERROR (2)');
        const ok = await h2Request(session, '/pay/after', { 'idempotency-key': uniqueKey('h2-after') }, 'a');
        assert.equal(ok.status, 201, 'the session stays usable');
      } finally {
        session.close();
      }
      const c = await curl(['--http2-prior-knowledge', '-H', `Idempotency-Key: ${uniqueKey('h2-break')}`, '--data-binary', 'c', `${proxy.url}${path}`]);
      assert.equal(c.code, 92, `curl's exit code for a stream not closed cleanly (${c.stderr})`);
    });
  }

  test('50 duplicate h2c streams on one connection execute once', async () => {
    const session = await h2Connect(proxy.url);
    try {
      await fiftyStreams(session, new URL(proxy.url).host);
    } finally {
      session.close();
    }
  });
});

describe('graceful shutdown with HTTP/2 sessions open', () => {
  test('close(): the stream in flight finishes, the session gets a GOAWAY, no new stream starts, close() returns', async () => {
    const proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: `listen: { address: 127.0.0.1:0, http2: true }\n${ROUTES}` });
    const session = await h2Connect(proxy.url);
    const order: string[] = [];
    session.once('goaway', () => order.push('goaway'));
    try {
      const before = upstream.executions();
      const slow = h2Request(session, '/pay/drain?delay=800', { 'idempotency-key': uniqueKey('drain') }, 'x')
        .then((r) => { order.push('answered'); return r; });
      await new Promise((r) => setTimeout(r, 200));
      const closed = proxy.close().then(() => order.push('closed'));
      const r = await slow;
      assert.equal(r.status, 201, 'the stream in flight finished');
      assert.deepEqual(order, ['goaway', 'answered'], 'GOAWAY at the start of the drain, before the answer');
      assert.equal(upstream.executions() - before, 1);
      await assert.rejects(h2Request(session, '/pay/late', { 'idempotency-key': uniqueKey('late') }, 'x'));
      await closed;
      assert.deepEqual(order, ['goaway', 'answered', 'closed']);
    } finally {
      session.destroy();
    }
  });

  test('past the shutdown deadline, responses still streaming are reset with INTERNAL_ERROR, never ended as if whole', async () => {
    const proxy = await startTestProxy({
      upstream: upstream.url, databaseUrl: db.url, yaml: `listen: { address: 127.0.0.1:0, http2: true }\n${ROUTES}`, start: { shutdownDeadlineMs: 300 },
    });
    const session = await h2Connect(proxy.url);
    session.on('error', () => {}); // the session's GOAWAY says INTERNAL_ERROR too
    try {
      const streams = ['/pay/drip', '/through/drip'].map((path) => {
        const stream = session.request({ ':method': 'POST', ':path': path, 'idempotency-key': uniqueKey('deadline') });
        stream.end('x');
        stream.resume();
        return stream;
      });
      const outcomes = streams.map((stream) => new Promise<string>((resolve) => {
        stream.once('error', () => resolve(`error, RST_STREAM ${stream.rstCode}`));
        stream.once('end', () => resolve(`end, RST_STREAM ${stream.rstCode}`));
      }));
      await Promise.all(streams.map((stream) => new Promise((r) => stream.once('response', r))));
      const closed = proxy.close();
      assert.deepEqual(await Promise.all(outcomes), ['error, RST_STREAM 2', 'error, RST_STREAM 2'],
        'each cut stream is an error, reset with INTERNAL_ERROR (2)');
      await closed;
    } finally {
      session.destroy();
      await proxy.close();
    }
  });
});
