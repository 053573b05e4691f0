import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { startTcpRelay, type TcpRelay } from '../faults/helpers/tcp-relay.js';
import { header, uniqueKey } from './support.js';
import { waitFor } from '../helpers/wait.js';

// docs/contract.md, "What is bound to a key": every answer the upstream's handler
// produced is stored, 5xx and 4xx included; the releaseOn statuses (default
// 401, 403, 429: rejected before the handler ran) give the key back.

const yaml = `
routes:
  - name: custom
    match: { path: "/custom/**" }
    releaseOn: [503]
  - name: rest
    match: { path: "/**" }
`;

describe('which upstream answers bind the key', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  /** Status per key for the next answer; 201 once used. */
  const plan = new Map<string, number[]>();
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream((req, n, res) => {
      const key = req.headers['idempotency-key'] as string;
      const status = plan.get(key)?.shift() ?? 201;
      if (req.url === '/cut') {
        // The status line, part of the body, then the connection dies.
        res.writeHead(status, { 'content-type': 'application/json', 'content-length': '1000' });
        res.write('{"part":', () => res.socket?.destroy());
        return;
      }
      res.writeHead(status, { 'content-type': 'application/json', 'retry-after': '0' });
      if (req.url === '/slow-tail') {
        // The status line at once, the end of the body a while later.
        res.flushHeaders();
        res.write('{"part":');
        setTimeout(() => res.end(`${JSON.stringify({ execution: n, status })}}`), 400);
        return;
      }
      res.end(JSON.stringify({ execution: n, status }));
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  const post = (path: string, key: string) => send(`${proxy.url}${path}`, { headers: { 'idempotency-key': key }, body: 'op' });

  for (const status of [500, 502, 503, 400, 404, 409, 422]) {
    test(`${status} from the upstream is stored and replayed`, async () => {
      const key = uniqueKey(`s${status}`);
      plan.set(key, [status]);
      const n = upstream.executions();
      const first = await post('/pay', key);
      assert.equal(first.status, status);
      const again = await post('/pay', key);
      assert.equal(again.status, status);
      assert.equal(header(again, 'idempotent-replayed'), 'true');
      assert.ok(again.body.equals(first.body));
      assert.equal(upstream.executions(), n + 1);
    });
  }

  for (const status of [429, 401, 403]) {
    test(`${status} releases the key: the retry executes again`, async () => {
      const key = uniqueKey(`r${status}`);
      plan.set(key, [status]);
      const n = upstream.executions();
      const first = await post('/pay', key);
      assert.equal(first.status, status, 'the client gets the upstream answer');
      assert.equal(first.json().status, status);
      assert.equal((await sql(db.url, 'SELECT 1 FROM idempotency_keys WHERE idem_key = $1', [key])).length, 0, 'no row left');
      const retry = await post('/pay', key);
      assert.equal(retry.status, 201);
      assert.equal(retry.headers['idempotent-replayed'], undefined);
      assert.equal(upstream.executions(), n + 2);
      const third = await post('/pay', key);
      assert.equal(header(third, 'idempotent-replayed'), 'true');
      assert.equal(upstream.executions(), n + 2);
    });
  }

  test('a released answer reaches the client only once the key is free: a retry sent on its status line executes', async () => {
    const key = uniqueKey('early');
    plan.set(key, [429]);
    const n = upstream.executions();
    // The first answer's status line arrives 400 ms before its body ends; the
    // client retries the moment it sees the status, before the body is complete.
    const first = await fetch(`${proxy.url}/slow-tail`, { method: 'POST', headers: { 'idempotency-key': key }, body: Buffer.from('op') }); // no content-type, as `post` sends it
    assert.equal(first.status, 429);
    const retry = await post('/slow-tail', key);
    assert.equal(retry.status, 201, 'the key was released before the 429 reached the client');
    const body = (await first.json()) as { part: { status: number } };
    assert.equal(body.part.status, 429, 'the rejection still arrives whole');
    assert.equal(upstream.executions(), n + 2);
  });

  test('a released answer whose body breaks off: the client gets a broken answer or a 502, and the key stays free', async () => {
    const key = uniqueKey('cut');
    plan.set(key, [429]);
    const n = upstream.executions();
    // The break may come while the answer waits for the release or after it
    // is relayed; either way nothing is bound to the key.
    const first = await post('/cut', key).catch((e: Error) => e);
    if (!(first instanceof Error)) {
      assert.equal(first.status, 502, 'a cut answer that never reached the client is a 502');
      assert.match(String(first.headers['content-type']), /problem\+json/);
    }
    const retry = await post('/pay', key);
    assert.equal(retry.status, 201, 'the retry executes: the key was released');
    assert.equal(upstream.executions(), n + 2);
  });

  test('a stored answer streams with its end held back: a duplicate during its slow tail gets 409, one after its end a replay', async () => {
    const key = uniqueKey('tail');
    const n = upstream.executions();
    const first = post('/slow-tail', key);
    await waitFor('the upstream to take the first request', () => (upstream.executions() === n + 1 ? true : undefined));
    const dup = await post('/slow-tail', key);
    assert.equal(dup.status, 409, 'still in flight while the body streams');
    const whole = await first;
    assert.equal(whole.status, 201);
    assert.equal(whole.json().part.status, 201);
    const again = await post('/slow-tail', key);
    assert.equal(header(again, 'idempotent-replayed'), 'true', 'committed by the time the client had the whole body');
    assert.ok(again.body.equals(whole.body));
    assert.equal(upstream.executions(), n + 1);
  });

  test('a route with releaseOn: [503] releases 503 and stores 429', async () => {
    const k503 = uniqueKey('c503');
    const k429 = uniqueKey('c429');
    plan.set(k503, [503]);
    plan.set(k429, [429]);
    assert.equal((await post('/custom/a', k503)).status, 503);
    assert.equal((await post('/custom/a', k503)).status, 201);
    assert.equal((await post('/custom/a', k429)).status, 429);
    const again = await post('/custom/a', k429);
    assert.equal(again.status, 429);
    assert.equal(header(again, 'idempotent-replayed'), 'true');
  });
});

describe('a released answer whose exchange fails while it waits for the release', () => {
  // The answer is held unread until the key is released; an error that comes
  // meanwhile (here upstream.timeout, with the release slowed down between
  // the proxy and PostgreSQL) is reported once the release is done, never
  // before: the client gets the failure, not the half-sent rejection, and the
  // key is free for the retry.
  let db: TestDatabase;
  let relay: TcpRelay;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  before(async () => {
    db = await createTestDatabase();
    const url = new URL(db.url);
    relay = await startTcpRelay(Number(url.port || 5432));
    url.port = String(relay.port);
    upstream = await startUpstream((req, _n, res) => {
      if (req.url === '/hang') {
        // The claim is done once the request is here: from now on every
        // statement (the release first) takes 2 × 400 ms.
        relay.setDelay(400);
        res.writeHead(429, { 'content-type': 'application/json', 'content-length': '1000' });
        res.write('{"part":'); // and never the rest
        return;
      }
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: url.toString(), yaml: 'upstream: { timeout: 250ms }\nroutes:\n  - name: all\n    match: { path: "/**" }\n' });
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await relay?.close();
    await db?.drop();
  });

  test('upstream.timeout during a slow release: the client gets 504 once the key is free, and the retry executes', async () => {
    const key = uniqueKey('held');
    const n = upstream.executions();
    const t0 = performance.now();
    const first = await send(`${proxy.url}/hang`, { headers: { 'idempotency-key': key }, body: 'op' });
    const took = performance.now() - t0;
    relay.setDelay(0);
    assert.equal(first.status, 504, 'the timeout, not the rejection whose body never came');
    assert.match(String(first.headers['content-type']), /problem\+json/);
    assert.ok(took >= 800, `answered after the slowed release (${Math.round(took)} ms), not when the timer fired`);
    assert.equal((await sql(db.url, 'SELECT 1 FROM idempotency_keys WHERE idem_key = $1', [key])).length, 0, 'no row left');
    const retry = await send(`${proxy.url}/pay`, { headers: { 'idempotency-key': key }, body: 'op' });
    assert.equal(retry.status, 201, 'the retry executes: the key was released');
    assert.equal(upstream.executions(), n + 2);
  });
});
