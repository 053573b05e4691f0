import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { request } from 'undici';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, row, rowCount, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { answer, hold, startControlledUpstream, type ControlledUpstream } from './helpers/controlled-upstream.js';
import { startTestProxy } from '../helpers/proxy.js';
import { openSocket, type OpenSocket, type RawReply } from '../helpers/raw-http.js';
import { sleep, waitFor } from '../helpers/wait.js';

// Client faults: a client that goes away at any stage, and slow-loris
// clients. docs/contract.md, step 7: once claimed, the upstream call completes and the
// record is committed, so the retry gets a replay. A key is never claimed
// before its request body is complete, and the listener's timeouts cut
// clients that trickle headers or bodies.

const HEADERS_TIMEOUT_MS = 800;
const REQUEST_TIMEOUT_MS = 1200;
const KEEP_ALIVE_MS = 1000;
const YAML = `
listen: { address: 127.0.0.1:0, headersTimeout: ${HEADERS_TIMEOUT_MS}ms, requestTimeout: ${REQUEST_TIMEOUT_MS}ms, keepAliveTimeout: ${KEEP_ALIVE_MS}ms }
upstream: { timeout: 10s }
defaults:
  lease: 1s
  tenant: { constant: t }
routes:
  - name: pay
    match: { path: "/pay/**" }
`;
/** The server's answer, or (if it never closes the connection) what came within 2 s. */
async function bounded(s: OpenSocket): Promise<RawReply> {
  const t = setTimeout(() => s.socket.destroy(), 2000);
  try {
    return await s.done;
  } finally {
    clearTimeout(t);
  }
}

describe('client faults', () => {
  let db: TestDatabase;
  let up: ControlledUpstream;
  let proxy: RunningProxy;
  let n = 0;
  const key = (what: string): string => `cl-${what}-${++n}-${Date.now()}`;
  const req = (k: string, body = '{"amount":7}') => ({ headers: { 'idempotency-key': k, 'content-type': 'application/json' }, body });

  before(async () => {
    db = await createTestDatabase();
    up = await startControlledUpstream();
    proxy = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: YAML });
  });

  after(async () => {
    await proxy?.close();
    await up?.close();
    await db?.drop();
  });

  test('disconnect during the body upload: nothing claimed, nothing forwarded; the retry executes', async () => {
    const k = key('upload');
    up.behave(answer());
    const s = await openSocket(proxy.url);
    await s.write(`POST /pay/1 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ${k}\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{"amou`);
    await sleep(100);
    s.socket.destroy();
    await sleep(200);
    assert.equal(await row(db.url, k), undefined);
    assert.equal(up.executions(k), 0);
    const r = await send(`${proxy.url}/pay/1`, req(k));
    assert.equal(r.status, 201);
    assert.equal(up.executions(k), 1);
  });

  test('disconnect while the upstream runs: the call completes, the record is committed, the retry gets the replay', async () => {
    const k = key('waiting');
    up.behave(hold);
    const ac = new AbortController();
    const first = request(`${proxy.url}/pay/1`, { method: 'POST', ...req(k), signal: ac.signal }).catch((e: Error) => e);
    const ex = await up.arrival((e) => e.key === k);
    ac.abort();
    assert.ok((await first) instanceof Error);
    await sleep(100);
    ex.respond(201, '{"charged":true}');
    await waitFor('the commit after the client left', async () => (await row(db.url, k))?.state === 'complete', 3000);
    const r = await send(`${proxy.url}/pay/1`, req(k));
    assert.equal(r.status, 201);
    assert.equal(r.headers['idempotent-replayed'], 'true');
    assert.equal(r.text(), '{"charged":true}');
    assert.equal(up.executions(k), 1);
  });

  test('disconnect during the response: the rest of the body is still read and committed', async () => {
    const k = key('response');
    up.behave((ex) => {
      ex.res.writeHead(200, { 'content-type': 'text/plain' });
      ex.res.write('first;');
      setTimeout(() => ex.res.write('second;'), 150);
      setTimeout(() => ex.res.end('third;'), 400);
    });
    const r0 = await request(`${proxy.url}/pay/1`, { method: 'POST', ...req(k) });
    for await (const c of r0.body) {
      assert.equal((c as Buffer).toString(), 'first;');
      break; // leaving the loop destroys the body: the client is gone mid-response
    }
    await waitFor('the commit after the client left', async () => (await row(db.url, k))?.state === 'complete', 3000);
    const r = await send(`${proxy.url}/pay/1`, req(k));
    assert.equal(r.headers['idempotent-replayed'], 'true');
    assert.equal(r.text(), 'first;second;third;');
    assert.equal(up.executions(k), 1);
  });

  test('slow-loris body: never claimed while trickling; the request timeout cuts it with 408', async () => {
    const k = key('loris-body');
    up.behave(answer());
    const before = await rowCount(db.url);
    const s = await openSocket(proxy.url);
    const t0 = Date.now();
    await s.write(`POST /pay/1 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ${k}\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n`);
    let sent = 0;
    while (!s.socket.destroyed && s.received().length === 0 && Date.now() - t0 < REQUEST_TIMEOUT_MS + 3000) {
      await s.write('x');
      sent++;
      await sleep(100);
      if (sent === 5) assert.equal(await row(db.url, k), undefined, 'claimed before the body was complete');
    }
    const reply = await bounded(s);
    const ms = Date.now() - t0;
    assert.ok(ms < REQUEST_TIMEOUT_MS + 2000, `the trickle lasted ${ms} ms`);
    assert.equal(reply.status, 408);
    assert.equal(await rowCount(db.url), before);
    assert.equal(up.executions(k), 0);
  });

  test('slow-loris headers: the headers timeout cuts them with 408; nothing reaches the store or the upstream', async () => {
    const k = key('loris-headers');
    const before = await rowCount(db.url);
    const s = await openSocket(proxy.url);
    const t0 = Date.now();
    const lines = ['POST /pay/1 HTTP/1.1\r\n', 'Host: x\r\n', `Idempotency-Key: ${k}\r\n`];
    for (let i = 0; !s.socket.destroyed && s.received().length === 0 && Date.now() - t0 < HEADERS_TIMEOUT_MS + 3000; i++) {
      await s.write(lines[i] ?? `X-Pad-${i}: ${'p'.repeat(10)}\r\n`);
      await sleep(100);
    }
    const reply = await bounded(s);
    assert.ok(Date.now() - t0 < HEADERS_TIMEOUT_MS + 2000);
    assert.equal(reply.status, 408);
    assert.equal(await rowCount(db.url), before);
    assert.equal(up.executions(k), 0);
  });
  test('an idle client connection is closed after listen.keepAliveTimeout, and each answer says how long it is kept', async () => {
    const k = key('idle');
    up.behave(answer());
    const s = await openSocket(proxy.url);
    await s.write(`POST /pay/1 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ${k}\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"amount":7}`);
    await waitFor('the answer', async () => s.received().includes('\r\n\r\n'), 3000);
    const answered = Date.now();
    // Node 24.6 and later keep the socket a second past what they advertise (keepAliveTimeoutBuffer).
    const giveUp = setTimeout(() => s.socket.destroy(), KEEP_ALIVE_MS + 3000);
    const reply = await s.done;
    clearTimeout(giveUp);
    const idle = Date.now() - answered;
    assert.equal(reply.status, 201);
    assert.equal(reply.header('keep-alive'), `timeout=${KEEP_ALIVE_MS / 1000}`);
    assert.equal(reply.closedByServer, true, `the proxy closed it (the default would keep it 65 s); gave up after ${idle} ms`);
    assert.ok(idle >= KEEP_ALIVE_MS - 100, `closed after ${idle} ms idle`);
  });
});
