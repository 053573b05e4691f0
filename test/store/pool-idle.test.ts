// store.idleTimeout: how long a PostgreSQL connection may sit idle in the
// proxy's pool before it is closed. node-postgres closes one after 10 s, and
// its pool hands out the connection released last, so under a steady load
// the few connections needed only at the load's peaks sat idle past that and
// were dialled again every few seconds (a probe on 2026-12-07: 60 s of 25
// clients sending new keys, the pool moving between 4 and 6 connections,
// opened 8 in all). The proxy keeps an idle connection 5 minutes unless
// store.idleTimeout says otherwise. Both proxies here are left idle at the
// same time, one with 300 ms and one with the default: the first closes its
// connections, the second keeps the very same server processes past pg's
// own 10 s.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send, together } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { sleep } from '../helpers/wait.js';

const ROUTES = `
routes:
  - name: pay
    match: { path: /pay/** }
    tenant: { constant: t }
`;

/** The server processes of the proxy's connections to `db` (its pool's, and any other it holds). */
async function backends(db: TestDatabase): Promise<number[]> {
  const rows = await sql<{ pid: number }>(db.url, `
    SELECT pid FROM pg_stat_activity
     WHERE datname = current_database() AND application_name = 'idempotency-proxy' ORDER BY pid`);
  return rows.map((r) => r.pid);
}

describe('store.idleTimeout', () => {
  let upstream: TestUpstream;
  let shortDb: TestDatabase;
  let defaultDb: TestDatabase;
  let short: RunningProxy;
  let dflt: RunningProxy;

  before(async () => {
    upstream = await startUpstream(jsonResponder(201, 50));
    [shortDb, defaultDb] = await Promise.all([createTestDatabase(), createTestDatabase()]);
    [short, dflt] = await Promise.all([
      startTestProxy({ upstream: upstream.url, databaseUrl: shortDb.url, yaml: `store: { idleTimeout: 300ms }\n${ROUTES}` }),
      startTestProxy({ upstream: upstream.url, databaseUrl: defaultDb.url, yaml: ROUTES }),
    ]);
  });
  after(async () => {
    await short?.close();
    await dflt?.close();
    await upstream?.close();
    await shortDb?.drop();
    await defaultDb?.drop();
  });

  test('an idle connection is closed after store.idleTimeout; by default it is kept past pg\'s 10 s', async () => {
    const pay = (proxy: RunningProxy, key: string) =>
      send(`${proxy.url}/pay/1`, { headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: '{"amount":1}' });
    const replies = await together(16, (i) => Promise.all([pay(short, `s-${i}`), pay(dflt, `d-${i}`)]));
    assert.deepEqual([...new Set(replies.flat().map((r) => r.status))], [201]);
    const [shortBusy, defaultBusy] = await Promise.all([backends(shortDb), backends(defaultDb)]);
    assert.ok(shortBusy.length > 0 && defaultBusy.length > 0, `connections after the requests: ${shortBusy.length} and ${defaultBusy.length}`);

    await sleep(1500);
    const shortLeft = (await backends(shortDb)).filter((pid) => shortBusy.includes(pid));
    assert.deepEqual(shortLeft, [], `idleTimeout 300ms: ${shortLeft.length} of ${shortBusy.length} connections still open after 1.5 s idle`);

    await sleep(10_000);
    const defaultLeft = await backends(defaultDb);
    assert.deepEqual(defaultLeft.filter((pid) => defaultBusy.includes(pid)), defaultBusy,
      `the default: server processes ${defaultBusy.join(', ')} after the requests, ${defaultLeft.join(', ') || 'none'} after 11.5 s idle`);
    // Kept, and still good: the next request is answered on them.
    assert.equal((await pay(dflt, 'd-after')).status, 201);
  });
});
