// onUnknownOutcome — an upstream timeout leaves the outcome unknown. `store`
// (default) binds the 504 to the key: the retry gets the same 504 and the
// operation never runs twice. `release` gives the key back: the retry runs
// again. Routes that trade safety for availability are named at startup, and
// so are routes whose lease a slow store can let run out.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { DOWNLOAD_BYTES, jsonResponder, oneConnectionYaml, startDownloadUpstream, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { problemType } from './support.js';
import { type LogLine, startLoggedProxy } from '../helpers/proxy.js';
import { waitFor } from '../helpers/wait.js';

const YAML = `
upstream: { timeout: 400ms }
# Under upstream.timeout: warned about at start. The tests' own shutdown deadline (5 s) is what the proxy uses.
shutdownTimeout: 300ms
defaults:
  tenant: { constant: t }
routes:
  - name: quotes-release
    match: { path: /quotes/** }
    onUnknownOutcome: release
  - name: payments-store
    match: { path: /payments/** }
  - name: search-lenient
    match: { path: /search/** }
    onStoreError: passthrough
  - name: both
    match: { path: /both/** }
    onUnknownOutcome: release
    onStoreError: passthrough
  - name: quick-lease
    match: { path: /quick/** }
    lease: 7s
  - name: static
    match: { path: /** }
    mode: passthrough
    onUnknownOutcome: release
    lease: 1s
`;

describe('onUnknownOutcome', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let lines: LogLine[];
  const hits = (path: string): number => upstream.received.filter((r) => r.url === path).length;
  const post = (path: string, key: string) => send(`${proxy.url}${path}`, { headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: '{"n":1}' });

  before(async () => {
    db = await createTestDatabase();
    // The first call to each path outlives upstream.timeout; later ones answer at once.
    upstream = await startUpstream((req, n, res) => jsonResponder(201, hits(req.url) === 1 ? 1000 : 0)(req, n, res));
    ({ proxy, lines } = await startLoggedProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML }));
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('release: the timeout answers 504 and gives the key back; the retry executes again', async () => {
    const first = await post('/quotes/q1', 'q-1');
    assert.equal(first.status, 504);
    assert.equal(problemType(first), 'upstream-timeout');
    assert.equal((await sql(db.url, "SELECT 1 FROM idempotency_keys WHERE idem_key = 'q-1'")).length, 0, 'the key was released');
    const retry = await post('/quotes/q1', 'q-1');
    assert.equal(retry.status, 201);
    assert.equal(retry.headers['idempotent-replayed'], undefined);
    assert.equal(hits('/quotes/q1'), 2, 'the operation ran twice: the trade this route chose');
    const line = lines.find((l) => l.msg === 'request' && l.route === 'quotes-release' && l.status === 504)!;
    assert.equal(line.outcome, 'upstream_error');
    assert.equal(line.released, true);
  });

  test('store (default): the 504 is bound to the key; the retry replays it and nothing runs twice', async () => {
    const first = await post('/payments/p1', 'p-1');
    assert.equal(first.status, 504);
    const retry = await post('/payments/p1', 'p-1');
    assert.equal(retry.status, 504);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.equal(problemType(retry), 'upstream-timeout');
    assert.equal(hits('/payments/p1'), 1);
  });

  test('the startup warning names the routes that trade safety for availability', () => {
    const warnings = lines.filter((l) => l.level === 'warn');
    const release = warnings.find((l) => /onUnknownOutcome: release/.test(String(l.msg)));
    const pass = warnings.find((l) => /onStoreError: passthrough/.test(String(l.msg)));
    assert.ok(release, `no onUnknownOutcome warning in ${JSON.stringify(warnings)}`);
    assert.ok(pass, `no onStoreError warning in ${JSON.stringify(warnings)}`);
    // Passthrough routes never deduplicate, so their policy does not matter and is not named.
    assert.deepEqual(release.routes, ['quotes-release', 'both']);
    assert.deepEqual(pass.routes, ['search-lenient', 'both']);
    // A lease under 1.5 × store.timeout (5 s by default): 7 s is, 90 s is not; a passthrough route holds no lease.
    const lease = warnings.find((l) => /lease shorter than 1\.5 × store\.timeout/.test(String(l.msg)));
    assert.ok(lease, `no lease warning in ${JSON.stringify(warnings)}`);
    assert.deepEqual(lease.routes, ['quick-lease']);
    assert.equal(lease.storeTimeoutMs, 5000);
    // shutdownTimeout (300ms here) under upstream.timeout (400ms): a request running at the deadline is cut, its key left to its lease.
    const shutdown = warnings.find((l) => /shutdownTimeout is shorter than upstream\.timeout/.test(String(l.msg)));
    assert.ok(shutdown, `no shutdown warning in ${JSON.stringify(warnings)}`);
    assert.equal(shutdown.shutdownTimeoutMs, 300);
    assert.equal(shutdown.upstreamTimeoutMs, 400);
    // Logged before the proxy starts listening.
    const listening = lines.findIndex((l) => l.msg === 'proxy listening');
    assert.ok(lines.indexOf(release) < listening && lines.indexOf(pass) < listening);
  });
});

// upstream.timeout bounds the exchange to within the timer's own precision, not undici's: its headers timeout
// runs on ticks of about half a second, so a 100 ms timeout there fired after 0.5–1 s and an answer sent at
// 450 ms was taken. The proxy and this upstream share one process and one timer list: the proxy's 100 ms
// timer, armed before the upstream even sees the request, always fires before the upstream's 450 ms one.
describe('upstream.timeout before the answer starts: the proxy\'s own timer', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201, 450));
    ({ proxy } = await startLoggedProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: 'upstream: { timeout: 100ms }\nroutes:\n  - { name: orders, match: { path: /orders } }\n' }));
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('an answer that starts after upstream.timeout is never taken: 504, bound to the key', async () => {
    const post = () => send(`${proxy.url}/orders`, { headers: { 'content-type': 'application/json', 'idempotency-key': 'o-1' }, body: '{"n":1}' });
    const first = await post();
    assert.equal(first.status, 504);
    assert.equal(problemType(first), 'upstream-timeout');
    const retry = await post();
    assert.equal(retry.status, 504);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.equal(upstream.executions(), 1);
  });
});

// upstream.timeout counts from the dispatch, the wait for a free connection to the upstream included (as
// store.timeout counts the wait for a pool connection). A request still waiting when it runs out was never
// sent: its key is released, the client gets a 502 at the deadline, and when a connection does free up the
// request is dropped unsent — never written with no time left and then cut off, which would leave an
// operation the upstream may run behind a 504. One connection to the upstream; a pass-through download holds
// it (a chunk every 100 ms for 1.6 s: no idle timeout fires) while the idempotent request waits behind it.
describe('upstream.timeout includes the wait for a connection to the upstream', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let lines: LogLine[];
  const hits = (path: string): number => upstream.received.filter((r) => r.url === path).length;

  before(async () => {
    db = await createTestDatabase();
    upstream = await startDownloadUpstream();
    ({ proxy, lines } = await startLoggedProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: oneConnectionYaml('400ms') }));
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('a request that gets no connection within upstream.timeout is never sent: 502, key released, the retry runs once', async () => {
    const download = send(`${proxy.url}/download`, { method: 'GET' });
    await waitFor('the download to hold the one connection', () => hits('/download') === 1);
    const post = () => send(`${proxy.url}/orders/o-9`, { headers: { 'content-type': 'application/json', 'idempotency-key': 'o-9' }, body: '{"n":9}' });
    const started = performance.now();
    const first = await post();
    const waited = performance.now() - started;
    assert.equal(first.status, 502);
    assert.equal(problemType(first), 'upstream-unreachable');
    assert.match(String(first.json().detail), /no connection to the upstream/);
    assert.ok(waited < 1200, `answered at the deadline, not when the connection freed (${Math.round(waited)} ms)`);
    assert.equal((await sql(db.url, "SELECT 1 FROM idempotency_keys WHERE idem_key = 'o-9'")).length, 0, 'the key was released');
    const line = lines.find((l) => l.msg === 'request' && l.route === 'orders' && l.status === 502)!;
    assert.equal(line.outcome, 'upstream_error');
    assert.equal(line.released, true);
    assert.match(String(line.detail), /no connection to the upstream became free within upstream\.timeout/);
    assert.equal((await download).body.length, DOWNLOAD_BYTES);
    // The waiting request got its connection once the download ended, and was dropped unsent: a request sent
    // after it, on the same one connection, is answered only after that.
    assert.equal((await send(`${proxy.url}/download`, { method: 'GET' })).status, 200);
    assert.equal(hits('/orders/o-9'), 0, 'the request that waited too long never reached the upstream');
    const retry = await post();
    assert.equal(retry.status, 201);
    assert.equal(retry.headers['idempotent-replayed'], undefined);
    assert.equal(hits('/orders/o-9'), 1);
  });

  // A pass-through request claims no key, but its client is owed the same bound: with the one connection
  // held, it waits upstream.timeout, not until the connection frees, and is never sent after its answer.
  test('a pass-through request that gets no connection within upstream.timeout gets 502 at the deadline and is never sent', async () => {
    const before = hits('/download');
    const download = send(`${proxy.url}/download`, { method: 'GET' });
    await waitFor('the download to hold the one connection', () => hits('/download') === before + 1);
    const started = performance.now();
    const second = await send(`${proxy.url}/download`, { method: 'GET' });
    const waited = performance.now() - started;
    assert.equal(second.status, 502);
    assert.equal(problemType(second), 'upstream-unreachable');
    assert.match(String(second.json().detail), /no connection to the upstream/);
    assert.ok(waited < 1200, `answered at the deadline, not when the connection freed (${Math.round(waited)} ms)`);
    const line = lines.find((l) => l.msg === 'request' && l.route === 'files' && l.status === 502)!;
    assert.equal(line.outcome, 'upstream_error');
    assert.match(String(line.detail), /no connection to the upstream became free within upstream\.timeout/);
    assert.equal((await download).body.length, DOWNLOAD_BYTES);
    // Dropped unsent once the download ended: a request after it, on the same one connection, is answered at
    // once, and the upstream saw one download.
    const next = await send(`${proxy.url}/orders/o-10`, { headers: { 'content-type': 'application/json', 'idempotency-key': 'o-10' }, body: '{"n":10}' });
    assert.equal(next.status, 201);
    assert.equal(hits('/download'), before + 1, 'the request that waited too long never reached the upstream');
  });
});
