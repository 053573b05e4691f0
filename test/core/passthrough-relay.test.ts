import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { captureLogger, requestLine as findRequestLine, repeatedSha256 } from './support.js';
import { readRawResponse } from '../helpers/raw-http.js';
import { Agent, request } from 'undici';
import { sleep, waitFor } from '../helpers/wait.js';

// The pass-through relay (src/proxy/relay.ts) hands the upstream's raw
// header lines and body chunks straight to the client's response. What it
// must keep doing: header bytes and repetitions as the upstream sent them
// (hop-by-hop removed), backpressure from a slow client all the way to the
// upstream, 1xx answers skipped, and a client that leaves before the answer
// logged as such.

const yaml = `
routes:
  - name: files
    match: { path: "/files/**" }
    mode: passthrough
`;

const BIG = 48 * 1024 * 1024;
const CHUNK = Buffer.alloc(64 * 1024, 7);

describe('pass-through relay', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const log = captureLogger('info');
  let bigWritten = 0;
  let bigBlocked = false;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(async (req, _n, res) => {
      if (req.url === '/files/headers') {
        res.setHeader('Set-Cookie', ['a=1; Path=/', 'b=2; Path=/']);
        res.setHeader('Connection', 'x-private, keep-alive');
        res.setHeader('X-Private', 'must not pass');
        res.setHeader('X-Mixed-Case', 'caf\u00e9 au lait'); // non-ASCII bytes on the wire
        res.setHeader('Content-Type', 'text/plain');
        res.end('headers');
        return;
      }
      if (req.url === '/files/early-hints') {
        res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' });
        await sleep(20);
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('final');
        return;
      }
      if (req.url === '/files/big') {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(BIG) });
        while (bigWritten < BIG) {
          bigWritten += CHUNK.length;
          if (!res.write(CHUNK)) {
            bigBlocked = true;
            await new Promise((r) => res.once('drain', r));
          }
        }
        res.end();
        return;
      }
      if (req.url === '/files/slow') {
        await sleep(300);
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('late');
        return;
      }
      res.writeHead(404);
      res.end();
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml, logger: log.logger });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  const requestLine = (path: string): Promise<Record<string, unknown>> => findRequestLine(log.lines, path);

  test('response headers: repeated lines kept, bytes as sent, hop-by-hop and Connection-named dropped', async () => {
    const res = await new Promise<http.IncomingMessage>((resolve, reject) =>
      http.get(`${proxy.url}/files/headers`, resolve).on('error', reject));
    const body: Buffer[] = [];
    for await (const c of res) body.push(c as Buffer);
    assert.equal(res.statusCode, 200);
    assert.equal(Buffer.concat(body).toString(), 'headers');
    assert.deepEqual(res.headers['set-cookie'], ['a=1; Path=/', 'b=2; Path=/']);
    // The same bytes as straight from the upstream (Node's client decodes both alike).
    const direct = await new Promise<http.IncomingMessage>((resolve, reject) =>
      http.get(`${upstream.url}/files/headers`, resolve).on('error', reject));
    direct.resume();
    assert.ok(String(direct.headers['x-mixed-case']).length > 'caf au lait'.length);
    assert.equal(res.headers['x-mixed-case'], direct.headers['x-mixed-case'], 'a non-ASCII header value arrives byte for byte');
    assert.equal(res.headers['x-private'], undefined, 'a header named in Connection is hop-by-hop');
    assert.equal(res.headers['content-type'], 'text/plain');
    const connection = res.headers['connection'] ?? '';
    assert.doesNotMatch(connection, /x-private/i, 'the upstream Connection header is not relayed');
  });

  test('a 1xx answer is skipped; the final answer is relayed', async () => {
    const res = await fetch(`${proxy.url}/files/early-hints`);
    assert.equal(res.status, 200);
    assert.equal(await res.text(), 'final');
  });

  test('a slow client slows the upstream down (backpressure), and every byte arrives', async () => {
    const u = new URL(proxy.url);
    const socket = net.connect(Number(u.port), u.hostname);
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.pause(); // read nothing yet
    socket.write(`GET /files/big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    await waitFor('the upstream to start sending', () => (bigWritten > 0 ? true : undefined));
    await sleep(1000);
    // Without backpressure the proxy would read the whole 48 MiB from the
    // upstream and buffer it; with it, the upstream is held back at a few
    // MiB of socket and stream buffers.
    assert.ok(bigBlocked, 'the upstream had to wait for the proxy to drain');
    assert.ok(bigWritten < BIG / 2, `the upstream wrote ${bigWritten} bytes while the client read nothing`);
    const { head, bytes, sha256 } = await readRawResponse(socket);
    assert.match(head, /^HTTP\/1\.1 200 /);
    assert.equal(bytes, BIG);
    assert.equal(sha256, repeatedSha256(CHUNK, BIG / CHUNK.length));
    const line = await requestLine('/files/big');
    assert.equal(line.outcome, 'passthrough');
    assert.equal(line.status, 200);
    assert.equal(line.detail, undefined);
  });

  test('a client that leaves before the upstream answers is logged as such, and the proxy goes on', async () => {
    const u = new URL(proxy.url);
    const s = net.connect(Number(u.port), u.hostname, () => s.write(`GET /files/slow HTTP/1.1\r\nHost: x\r\n\r\n`));
    s.on('error', () => {});
    await sleep(50);
    s.destroy();
    const line = await requestLine('/files/slow');
    assert.equal(line.outcome, 'passthrough', JSON.stringify(line));
    assert.match(String(line.detail), /client closed the connection/);
    const again = await fetch(`${proxy.url}/files/headers`);
    assert.equal(again.status, 200);
    await again.arrayBuffer();
  });
});

describe('an upstream that answers before it has read the request body', () => {
  // Undici stops sending the body and destroys the client's request stream; the rest of the body would stay
  // unread on the client's keep-alive connection, and its next request there would never be parsed
  // (src/proxy/relay-handler.ts, answeredEarly).
  let db: TestDatabase;
  let early: http.Server;
  let proxy: RunningProxy;
  before(async () => {
    db = await createTestDatabase();
    early = http.createServer((_req, res) => {
      res.writeHead(413, { 'content-type': 'text/plain' });
      res.end('too large');
    });
    await new Promise<void>((r) => early.listen(0, '127.0.0.1', r));
    proxy = await startTestProxy({ upstream: `http://127.0.0.1:${(early.address() as net.AddressInfo).port}`, databaseUrl: db.url, yaml });
  });
  after(async () => {
    await proxy.close();
    early.closeAllConnections();
    await new Promise((r) => early.close(r));
    await db.drop();
  });

  test("each of the client's next requests is answered (a connection still receiving its body is closed after the answer)", async () => {
    // One connection at a time: a stalled connection would hold the next request until its headers timeout. (When
    // the whole body had arrived before the answer started, the connection is kept: there is nothing to stall.)
    const agent = new Agent({ connections: 1 });
    try {
      for (let i = 0; i < 6; i++) {
        const r = await request(`${proxy.url}/files/upload-${i}`, {
          method: 'POST', body: Buffer.alloc(2 * 1024 * 1024, 1), dispatcher: agent, headersTimeout: 5000, bodyTimeout: 5000,
        });
        assert.equal(await r.body.text(), 'too large');
        assert.equal(r.statusCode, 413);
      }
    } finally {
      await agent.close();
    }
  });
});
