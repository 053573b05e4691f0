import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { assertProblem, header, uniqueKey } from './support.js';
import { sleep } from '../helpers/wait.js';

// docs/contract.md, step 6 (forward, lease heartbeat): while the upstream call runs longer than a third of the
// lease, the proxy extends locked_until, so a slow upstream never lets a
// duplicate through.

describe('lease heartbeat', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let other: RunningProxy;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201, 3000));
    const yaml = 'defaults: { lease: 1s }';
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml });
    // A second instance on the same database: it only sees the row, not this process's timers.
    other = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml });
  });
  after(async () => {
    await proxy.close();
    await other.close();
    await upstream.close();
    await db.drop();
  });

  test('lease 1s, upstream 3s: a duplicate at 2.5s still gets 409; one execution', async () => {
    const key = uniqueKey('hb');
    const opts = { headers: { 'idempotency-key': key }, body: 'slow op' };
    const first = send(`${proxy.url}/pay`, opts);
    await sleep(1500);
    const [row] = await sql<{ left_ms: number }>(db.url,
      'SELECT extract(epoch FROM locked_until - now()) * 1000 AS left_ms FROM idempotency_keys WHERE idem_key = $1', [key]);
    assert.ok(Number(row!.left_ms) > 0, `the lease was extended past its first second (${row!.left_ms} ms left at 1.5 s)`);
    await sleep(1000);
    const dup = await send(`${other.url}/pay`, opts);
    assertProblem(dup, 'in-flight', 409);
    assert.equal(header(dup, 'retry-after'), '1');
    assert.equal(upstream.executions(), 1, 'no second execution while the first runs');
    const done = await first;
    assert.equal(done.status, 201);
    const replay = await send(`${other.url}/pay`, opts);
    assert.equal(header(replay, 'idempotent-replayed'), 'true');
    assert.ok(replay.body.equals(done.body));
    assert.equal(upstream.executions(), 1);
  });

  test('retention (ttl) running out while the upstream still runs does not free the key', async () => {
    // ttl 1s, lease 1s, upstream 3s: at 2 s the row is past its retention but its lease is live.
    const short = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: 'defaults: { lease: 1s, ttl: 1s }' });
    try {
      const key = uniqueKey('ttl-live');
      const opts = { headers: { 'idempotency-key': key }, body: 'slow op' };
      const n = upstream.executions();
      const first = send(`${short.url}/pay`, opts);
      await sleep(2000);
      const [row] = await sql<{ expired: boolean; live: boolean }>(db.url,
        'SELECT expires_at <= now() AS expired, locked_until > now() AS live FROM idempotency_keys WHERE idem_key = $1', [key]);
      assert.deepEqual(row, { expired: true, live: true });
      const dup = await send(`${short.url}/pay`, opts);
      assertProblem(dup, 'in-flight', 409);
      assert.equal(upstream.executions(), n + 1, 'no second execution while the first runs');
      assert.equal((await first).status, 201);
    } finally {
      await short.close();
    }
  });
});
