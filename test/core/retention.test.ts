import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { header, uniqueKey } from './support.js';
import { sleep, waitFor } from '../helpers/wait.js';

// docs/contract.md, Storage: retention (ttl, counted from the first claim). An expired row acts
// as absent at once — the key is new again — and the sweeper deletes expired
// rows in bounded batches.

const yaml = `
store: { sweepInterval: 200ms, sweepBatchSize: 2 }
routes:
  - name: short
    match: { path: "/short/**" }
    ttl: 1s
    lease: 1s
  - name: long
    match: { path: "/**" }
`;

describe('retention', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201));
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  const post = (path: string, key: string, body = 'op') => send(`${proxy.url}${path}`, { headers: { 'idempotency-key': key }, body });

  test('ttl: 1s — after a second the key is new again (even with another payload)', async () => {
    const key = uniqueKey('ttl');
    const first = await post('/short/a', key);
    assert.equal(header(await post('/short/a', key), 'idempotent-replayed'), 'true');
    const [row] = await sql<{ ms: number }>(db.url,
      'SELECT extract(epoch FROM expires_at - created_at) * 1000 AS ms FROM idempotency_keys WHERE idem_key = $1', [key]);
    assert.ok(Math.abs(Number(row!.ms) - 1000) < 50, `retention counted from the claim: ${row!.ms}`);
    await sleep(1100);
    const again = await post('/short/a', key, 'another payload');
    assert.equal(again.status, 201);
    assert.equal(again.headers['idempotent-replayed'], undefined);
    assert.notEqual(again.json().execution, first.json().execution);
  });

  test('expires_at moved into the past (SQL): the key is new again at once', async () => {
    const key = uniqueKey('sql');
    const n = upstream.executions();
    await post('/b', key);
    await sql(db.url, "UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE idem_key = $1", [key]);
    const again = await post('/b', key);
    assert.equal(again.headers['idempotent-replayed'], undefined);
    assert.equal(upstream.executions(), n + 2);
    const [row] = await sql<{ attempt: number; state: string; fresh: boolean }>(db.url,
      "SELECT attempt, state, expires_at > now() + interval '23 hours' AS fresh FROM idempotency_keys WHERE idem_key = $1", [key]);
    assert.deepEqual(row, { attempt: 1, state: 'complete', fresh: true }, 'a new record with a new retention');
  });

  test('the sweeper deletes expired rows (in batches) and leaves live ones', async () => {
    const expired = [1, 2, 3, 4, 5].map((i) => uniqueKey(`sweep${i}`));
    const live = uniqueKey('live');
    await Promise.all([...expired, live].map((k) => post('/c', k)));
    await sql(db.url, "UPDATE idempotency_keys SET expires_at = now() - interval '1 minute' WHERE idem_key = ANY($1)", [expired]);
    await waitFor('the sweeper to delete the expired rows', async () => {
      const rows = await sql(db.url, 'SELECT 1 FROM idempotency_keys WHERE idem_key = ANY($1)', [expired]);
      return rows.length === 0 ? true : undefined;
    }, 5000, 100);
    assert.equal((await sql(db.url, 'SELECT 1 FROM idempotency_keys WHERE idem_key = $1', [live])).length, 1);
    const text = await proxy.metrics.registry.metrics();
    const m = /^idempotency_proxy_sweeper_deleted_total (\d+)/m.exec(text);
    assert.ok(m !== null && Number(m[1]) >= expired.length, 'the sweeper metric counts deletions');
  });
});
