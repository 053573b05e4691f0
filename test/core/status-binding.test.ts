import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { header, uniqueKey } from './support.js';

// SPEC "What is bound to a key": every answer the upstream's handler
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
      res.writeHead(status, { 'content-type': 'application/json', 'retry-after': '0' });
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
