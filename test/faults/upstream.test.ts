import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, row, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { streamed } from './helpers/client.js';
import { answer, hold, startControlledUpstream, type ControlledUpstream } from './helpers/controlled-upstream.js';
import { PROBLEM_BASE } from '../../src/http/problems.js';
import { startTestProxy } from '../helpers/proxy.js';
import { sleep, waitFor } from '../helpers/wait.js';

// Upstream faults, classified by when they happen (docs/contract.md, "What is bound to
// a key"): refused → 502, released; reset/timeout after sending → 502/504,
// stored and replayed (onUnknownOutcome: store) or released; a slow body
// holds the key (heartbeat); an oversized response is delivered, recorded
// without its body, and never run again.

const TIMEOUT_MS = 1000;
const yaml = (timeout: string) => `
upstream: { timeout: ${timeout} }
defaults:
  lease: 1s
  tenant: { constant: t }
routes:
  - name: store
    match: { path: "/store/**" }
    maxStoredResponseBytes: 1KiB
  - name: release
    match: { path: "/release/**" }
    onUnknownOutcome: release
`;

describe('upstream faults', () => {
  let db: TestDatabase;
  let up: ControlledUpstream;
  let fast: RunningProxy; // upstream.timeout 1s
  let slow: RunningProxy; // upstream.timeout 5s
  let n = 0;
  const key = (what: string): string => `up-${what}-${++n}-${Date.now()}`;
  const req = (k: string, body = '{"amount":1}') => ({ headers: { 'idempotency-key': k, 'content-type': 'application/json' }, body });

  before(async () => {
    db = await createTestDatabase();
    up = await startControlledUpstream();
    fast = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: yaml('1s') });
    slow = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: yaml('5s') });
  });

  after(async () => {
    await fast?.close();
    await slow?.close();
    await up?.close();
    await db?.drop();
  });

  test('connection refused: 502 upstream-unreachable, key released, the retry runs once the upstream is back', async () => {
    const gone = await startControlledUpstream();
    const port = gone.port;
    await gone.close();
    const p = await startTestProxy({ upstream: `http://127.0.0.1:${port}`, databaseUrl: db.url, yaml: yaml('1s') });
    try {
      const k = key('refused');
      const r1 = await send(`${p.url}/store/1`, req(k));
      assert.equal(r1.status, 502);
      assert.equal(r1.json().type, `${PROBLEM_BASE}upstream-unreachable`);
      assert.equal(await row(db.url, k), undefined, 'the request was never sent: the key is not bound');
      const r2 = await send(`${p.url}/store/1`, req(k));
      assert.equal(r2.status, 502, 'a retry is not a 409 and not a replay');
      const back = await startControlledUpstream(answer(), port);
      try {
        const r3 = await send(`${p.url}/store/1`, req(k));
        assert.equal(r3.status, 201);
        assert.equal(back.executions(k), 1);
      } finally {
        await back.close();
      }
    } finally {
      await p.close();
    }
  });

  test('reset before any response: 502 upstream-reset, stored and replayed (onUnknownOutcome: store)', async () => {
    const k = key('reset-early');
    up.behave((ex) => ex.res.socket?.destroy());
    const r1 = await send(`${fast.url}/store/1`, req(k));
    assert.equal(r1.status, 502);
    assert.equal(r1.json().type, `${PROBLEM_BASE}upstream-reset`);
    up.behave(answer());
    const r2 = await send(`${fast.url}/store/1`, req(k));
    assert.equal(r2.status, 502);
    assert.equal(r2.headers['idempotent-replayed'], 'true');
    assert.equal(up.executions(k), 1, 'the outcome is unknown: the operation must not run again silently');
  });

  test('reset mid-response (half the body, then the socket dies): the client sees a broken response; the 502 is stored and replayed', async () => {
    const k = key('reset-mid');
    up.behave((ex) => {
      ex.res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '1000' });
      ex.res.write('x'.repeat(500));
      setTimeout(() => ex.res.socket?.destroy(), 50);
    });
    const s = await streamed(`${fast.url}/store/1`, req(k));
    assert.ok(!(s instanceof Error) || /other side closed|socket|terminated|ECONNRESET/i.test(s.message), s instanceof Error ? s.message : '');
    if (!(s instanceof Error)) assert.equal(await s.end, 'broken', 'a half body must never look complete');
    const r = await waitFor('the unknown outcome to be committed', async () => {
      const x = await row(db.url, k);
      return x?.state === 'complete' ? x : undefined;
    }, 3000);
    assert.equal(r.status_code, 502);
    up.behave(answer());
    const replay = await send(`${fast.url}/store/1`, req(k));
    assert.equal(replay.status, 502);
    assert.equal(replay.json().type, `${PROBLEM_BASE}upstream-reset`);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.equal(up.executions(k), 1);
  });

  test('reset mid-response on an onUnknownOutcome: release route: key released, the retry runs again', async () => {
    const k = key('reset-release');
    up.behave((ex) => {
      ex.res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '1000' });
      ex.res.write('x'.repeat(500));
      setTimeout(() => ex.res.socket?.destroy(), 50);
    });
    const s = await streamed(`${fast.url}/release/1`, req(k));
    if (!(s instanceof Error)) assert.equal(await s.end, 'broken');
    await waitFor('the key to be released', async () => (await row(db.url, k)) === undefined, 3000);
    up.behave(answer());
    const r = await send(`${fast.url}/release/1`, req(k));
    assert.equal(r.status, 201);
    assert.equal(up.executions(k), 2);
  });

  test('upstream hangs past upstream.timeout: 504 within the timeout, stored and replayed', async () => {
    const k = key('hang');
    up.behave(hold);
    const t0 = Date.now();
    const r1 = await send(`${fast.url}/store/1`, req(k));
    const ms = Date.now() - t0;
    assert.equal(r1.status, 504);
    assert.equal(r1.json().type, `${PROBLEM_BASE}upstream-timeout`);
    assert.ok(ms >= TIMEOUT_MS - 50 && ms < TIMEOUT_MS + 1500, `answered after ${ms} ms`);
    up.behave(answer());
    const r2 = await send(`${fast.url}/store/1`, req(k));
    assert.equal(r2.status, 504);
    assert.equal(r2.headers['idempotent-replayed'], 'true');
    assert.equal(up.executions(k), 1);
  });

  test('hang on an onUnknownOutcome: release route: 504, key released, the retry runs again', async () => {
    const k = key('hang-release');
    up.behave(hold);
    const r1 = await send(`${fast.url}/release/1`, req(k));
    assert.equal(r1.status, 504);
    assert.equal(await row(db.url, k), undefined);
    up.behave(answer());
    const r2 = await send(`${fast.url}/release/1`, req(k));
    assert.equal(r2.status, 201);
    assert.equal(up.executions(k), 2);
  });

  test('very slow body within the timeout: the lease is held past its length, a duplicate gets 409, the record is complete', async () => {
    const k = key('slow-body');
    const chunks = Array.from({ length: 14 }, (_, i) => `chunk-${i};`);
    up.behave((ex) => {
      ex.res.writeHead(200, { 'content-type': 'text/plain' });
      let i = 0;
      const t = setInterval(() => {
        ex.res.write(chunks[i++]);
        if (i === chunks.length) {
          clearInterval(t);
          ex.res.end();
        }
      }, 250);
    });
    const s = await streamed(`${slow.url}/store/1`, req(k));
    assert.ok(!(s instanceof Error));
    await sleep(1500); // past the 1 s lease; the body runs 3.5 s in all
    const dup = await send(`${slow.url}/store/1`, req(k));
    assert.equal(dup.status, 409, 'the heartbeat keeps a slow body from letting a duplicate through');
    assert.equal(dup.json().type, `${PROBLEM_BASE}in-flight`);
    assert.equal(await s.end, 'complete');
    assert.equal(s.received(), chunks.join(''));
    const replay = await send(`${slow.url}/store/1`, req(k));
    assert.equal(replay.status, 200);
    assert.equal(replay.text(), chunks.join(''));
    assert.equal(up.executions(k), 1);
  });

  test('slow body past upstream.timeout: the client sees a broken response; the stored answer is 504 upstream-timeout', async () => {
    const k = key('slow-timeout');
    up.behave((ex) => {
      ex.res.writeHead(200, { 'content-type': 'text/plain' });
      const t = setInterval(() => (ex.res.destroyed ? clearInterval(t) : ex.res.write('.')), 200);
      ex.res.on('close', () => clearInterval(t));
    });
    const s = await streamed(`${fast.url}/store/1`, req(k));
    assert.ok(!(s instanceof Error));
    assert.equal(await s.end, 'broken');
    const r = await waitFor('the timeout to be committed', async () => {
      const x = await row(db.url, k);
      return x?.state === 'complete' ? x : undefined;
    }, 3000);
    assert.equal(r.status_code, 504);
    up.behave(answer());
    const replay = await send(`${fast.url}/store/1`, req(k));
    assert.equal(replay.status, 504);
    assert.equal(replay.json().type, `${PROBLEM_BASE}upstream-timeout`);
    assert.equal(up.executions(k), 1);
  });

  test('response over maxStoredResponseBytes: delivered whole, recorded without its body, replayed as body-not-retained', async () => {
    const k = key('large');
    const big = Buffer.alloc(64 * 1024, 'L');
    up.behave((ex) => ex.respond(201, big, { 'content-type': 'text/plain', 'x-order': '42' }));
    const r1 = await send(`${fast.url}/store/1`, req(k));
    assert.equal(r1.status, 201);
    assert.deepEqual(r1.body, big);
    const [rec] = await sql<{ body_retained: boolean; body_size: string; n: number }>(db.url,
      'SELECT body_retained, body_size, octet_length(response_body)::int AS n FROM idempotency_keys WHERE idem_key = $1', [k]);
    assert.deepEqual([rec?.body_retained, Number(rec?.body_size), rec?.n], [false, big.length, 0]);
    const r2 = await send(`${fast.url}/store/1`, req(k));
    assert.equal(r2.status, 201);
    assert.equal(r2.headers['idempotent-replayed'], 'true');
    assert.equal(r2.headers['x-order'], '42');
    assert.equal(r2.json().type, `${PROBLEM_BASE}body-not-retained`);
    assert.equal(r2.json().originalBodyBytes, big.length);
    assert.equal(up.executions(k), 1, 'never by running the operation again');
  });
});
