import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { header, uniqueKey } from './support.js';
import { rawRequest } from '../helpers/raw-http.js';
import { sleep, waitFor } from '../helpers/wait.js';

// docs/contract.md, step 7 (commit): a client that goes away changes nothing — the upstream
// call completes, the record is committed, and the retry gets the replay.

describe('client disconnect', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201, 800));
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  async function retryGetsReplay(key: string, body: string): Promise<void> {
    const state = await waitFor('the record to be committed', async () => {
      const [row] = await sql<{ state: string }>(db.url, 'SELECT state FROM idempotency_keys WHERE idem_key = $1', [key]);
      return row?.state === 'complete' ? row.state : undefined;
    }, 5000, 50);
    assert.equal(state, 'complete');
    const retry = await send(`${proxy.url}/pay`, { headers: { 'idempotency-key': key }, body });
    assert.equal(retry.status, 201);
    assert.equal(header(retry, 'idempotent-replayed'), 'true');
    assert.equal(retry.json().body, body);
  }

  test('the client aborts while the upstream runs: the upstream completes, the retry replays; one execution', async () => {
    const key = uniqueKey('abort');
    const n = upstream.executions();
    await assert.rejects(request(`${proxy.url}/pay`, {
      method: 'POST', headers: { 'idempotency-key': key }, body: 'abort me', signal: AbortSignal.timeout(200),
    }));
    // The client left after 200 ms; the request goes on to the upstream however long the claim took.
    await waitFor('the upstream to get the request', () => upstream.executions() === n + 1, 5000);
    await retryGetsReplay(key, 'abort me');
    assert.equal(upstream.executions(), n + 1);
  });

  test('the client closes its socket right after sending: same outcome', async () => {
    const key = uniqueKey('close');
    const n = upstream.executions();
    // rawRequest gives up (and destroys the socket) after 100 ms.
    await assert.rejects(rawRequest(proxy.url,
      `POST /pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ${key}\r\nContent-Length: 5\r\n\r\nclose`, { timeoutMs: 100 }));
    await retryGetsReplay(key, 'close');
    assert.equal(upstream.executions(), n + 1);
  });

  test('a client that aborts before its body is complete binds nothing', async () => {
    const key = uniqueKey('partial');
    const n = upstream.executions();
    await assert.rejects(rawRequest(proxy.url,
      `POST /pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ${key}\r\nContent-Length: 100\r\n\r\nonly 20 bytes here..`, { timeoutMs: 100 }));
    await sleep(100);
    assert.equal(upstream.executions(), n);
    assert.equal((await sql(db.url, 'SELECT 1 FROM idempotency_keys WHERE idem_key = $1', [key])).length, 0);
    const r = await send(`${proxy.url}/pay`, { headers: { 'idempotency-key': key }, body: 'now whole' });
    assert.equal(r.status, 201);
    assert.equal(r.headers['idempotent-replayed'], undefined);
  });
});
