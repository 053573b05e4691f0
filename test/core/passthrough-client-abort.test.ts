import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import net from 'node:net';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { startTestProxy } from '../helpers/proxy.js';
import { send } from '../helpers/http.js';
import { DOWNLOAD_BYTES, oneConnectionYaml, startDownloadUpstream, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { captureLogger, requestLine as findRequestLine } from './support.js';
import { sleep, waitFor } from '../helpers/wait.js';

// A client that hangs up in the middle of a pass-through response is the
// client's doing: the request is logged and counted as passthrough (with a
// detail saying so), not as an upstream error that would alert whoever
// watches idempotency_proxy_requests_total{outcome="upstream_error"}. An
// upstream that breaks off its own response still is an upstream error.

const yaml = `
routes:
  - name: files
    match: { path: "/files/**" }
    mode: passthrough
`;

describe('pass-through: who broke the response off', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const log = captureLogger('info');
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(async (req, _n, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.write(Buffer.alloc(1024, 1));
      await sleep(400);
      if (req.url === '/files/upstream-breaks') {
        res.socket?.destroy();
        return;
      }
      res.end(Buffer.alloc(1024, 2));
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml, logger: log.logger });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  const outcomes = async (): Promise<Record<string, number>> => {
    const text = await proxy.metrics.registry.metrics();
    const out: Record<string, number> = {};
    for (const m of text.matchAll(/^idempotency_proxy_requests_total\{route="files",outcome="([a-z_]+)"\} (\d+)$/gm)) out[m[1]!] = Number(m[2]);
    return out;
  };
  const requestLine = (path: string): Promise<Record<string, unknown>> => findRequestLine(log.lines, path);
  const get = (path: string, leaveAfterFirstChunk: boolean): Promise<void> => {
    const u = new URL(proxy.url);
    return new Promise<void>((resolve) => {
      const s = net.connect(Number(u.port), u.hostname, () => s.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`));
      s.once('data', () => {
        if (leaveAfterFirstChunk) s.destroy();
      });
      s.on('close', () => resolve());
      s.on('error', () => resolve());
    });
  };

  test('the client hangs up after the first chunk: passthrough, with the reason', async () => {
    await get('/files/client-leaves', true);
    const line = await requestLine('/files/client-leaves');
    assert.equal(line.outcome, 'passthrough', JSON.stringify(line));
    assert.match(String(line.detail), /client closed the connection/);
    await waitFor('the request to be counted', async () => ((await outcomes()).passthrough ?? 0) >= 1 ? true : undefined);
    assert.equal((await outcomes()).upstream_error ?? 0, 0, 'not counted as an upstream error');
  });

  test('the client hangs up in the middle of its request body: passthrough, with the reason; the upload never completes upstream', async () => {
    const u = new URL(proxy.url);
    const before = upstream.executions();
    await new Promise<void>((resolve) => {
      const s = net.connect(Number(u.port), u.hostname, () => {
        s.write(`POST /files/upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n${'u'.repeat(1000)}`);
        // Long enough for the proxy to have the upstream request under way with part of the body sent.
        setTimeout(() => s.destroy(), 300);
      });
      s.on('close', () => resolve());
      s.on('error', () => resolve());
    });
    const line = await requestLine('/files/upload');
    assert.equal(line.outcome, 'passthrough', JSON.stringify(line));
    assert.match(String(line.detail), /client closed the connection before its request was complete/);
    assert.equal((await outcomes()).upstream_error ?? 0, 0, 'not counted as an upstream error');
    assert.equal(upstream.executions(), before, 'the upstream never got the whole body');
  });

  test('the upstream breaks its response off: still an upstream error', async () => {
    await get('/files/upstream-breaks', false);
    const line = await requestLine('/files/upstream-breaks');
    assert.equal(line.outcome, 'upstream_error', JSON.stringify(line));
    assert.equal((await outcomes()).upstream_error, 1);
  });
});

// The same over HTTP/2 (h2c): a stream the client cancels in the middle of its body ends early, so undici sees a
// body shorter than its content-length; that too is the client's doing.
describe('pass-through over HTTP/2: a client that cancels its stream in the middle of the request body', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const log = captureLogger('info');
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream();
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: `listen: { address: 127.0.0.1:0, http2: true }\n${yaml}`, logger: log.logger });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  test('passthrough, with the reason; not counted as an upstream error', async () => {
    const session = http2.connect(proxy.url);
    try {
      await new Promise<void>((resolve) => {
        const s = session.request({ ':method': 'POST', ':path': '/files/h2-upload', 'content-length': '100000' });
        s.on('error', () => resolve());
        s.on('close', () => resolve());
        s.write('u'.repeat(1000));
        setTimeout(() => s.close(http2.constants.NGHTTP2_CANCEL), 300);
      });
      const line = await findRequestLine(log.lines, '/files/h2-upload');
      assert.equal(line.outcome, 'passthrough', JSON.stringify(line));
      assert.match(String(line.detail), /client closed the connection before its request was complete/);
      assert.equal(upstream.executions(), 0, 'the upstream never got the whole body');
    } finally {
      session.close();
    }
  });
});

// A pass-through request still waiting for a connection to the upstream (every one of upstream.connections busy)
// when its client hangs up is never sent: nobody is left to read its answer, and a request the client gave up
// on (a POST to a passthrough route, say) must not run behind its back when a connection frees. One upstream
// connection; a download holds it for 1.6 s, well inside upstream.timeout, so only the client's leaving can
// stop the waiting request.
describe('pass-through: a client that hangs up while its request waits for an upstream connection', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const log = captureLogger('info');
  const downloads = (): number => upstream.received.filter((r) => r.url === '/download').length;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startDownloadUpstream();
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: oneConnectionYaml('5s'), logger: log.logger });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  test('the waiting request is dropped unsent, logged as the client\'s doing, and the connection serves the next request', async () => {
    const download = send(`${proxy.url}/download`, { method: 'GET' });
    await waitFor('the download to hold the one connection', () => downloads() === 1);
    // A second download waits for the connection; its client hangs up 200 ms later, long before the first ends.
    const u = new URL(proxy.url);
    await new Promise<void>((resolve, reject) => {
      const s = net.connect(Number(u.port), u.hostname, () => {
        s.write('GET /download HTTP/1.1\r\nHost: x\r\n\r\n');
        setTimeout(() => s.destroy(), 200);
      });
      s.on('close', () => resolve());
      s.on('error', reject);
    });
    const line = await waitFor('the request line of the download whose client left', () => log.lines
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((j) => j.msg === 'request' && j.path === '/download' && /client closed/.test(String(j.detail))));
    assert.equal(line.outcome, 'passthrough', JSON.stringify(line));
    assert.equal((await download).body.length, DOWNLOAD_BYTES);
    // The one connection is free again: the next request goes through it at once.
    const next = await send(`${proxy.url}/orders/o-1`, { headers: { 'content-type': 'application/json', 'idempotency-key': 'o-1' }, body: '{"n":1}' });
    assert.equal(next.status, 201);
    assert.equal(downloads(), 1, 'the download whose client left never reached the upstream');
  });
});
