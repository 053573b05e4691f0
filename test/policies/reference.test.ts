// record: reference — a 2xx answer with a Location on the upstream is stored
// as status and headers with a reference; a replay GETs the Location from the
// upstream (with the tenant's credential header) and answers the original
// status with the resource's CURRENT body. The operation never runs twice,
// whatever the GET gives. Real PostgreSQL and an order service over HTTP;
// the Redis cache and tracing: reference-cache.test.ts.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import type { RunningProxy } from '../../src/app.js';
import { ConfigError } from '../../src/config/errors.js';
import { loadConfig } from '../../src/config/load.js';
import { REFERENCE_RECORD_HEADER } from '../../src/proxy/headers.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { runCli, startTestProxy } from '../helpers/proxy.js';
import { DOWNLOAD_BYTES, oneConnectionYaml, startDownloadUpstream, startUpstream, type Received, type TestUpstream } from '../helpers/upstream.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { AUTH, YAML, assertNoReserved, headersFor, orderService, type Order } from './reference-service.js';
import { problemType } from './support.js';

describe('record: reference (PostgreSQL)', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const svc = orderService();
  const posts = (path: string): number => upstream.received.filter((r) => r.method === 'POST' && r.url === path).length;
  const gets = (): Received[] => upstream.received.filter((r) => r.method === 'GET');
  const row = async (key: string) => (await sql(db.url, 'SELECT state, status_code, body_retained, response_body, response_headers FROM idempotency_keys WHERE idem_key = $1', [key]))[0] as
    { state: string; status_code: number; body_retained: boolean; response_body: Buffer; response_headers: Array<[string, string]> };

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(svc.responder);
    svc.setOrigin(upstream.url);
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML });
  });

  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('a retry after a PATCH gets the original 201 with the current body; the POST ran once', async () => {
    const first = await send(`${proxy.url}/orders`, { headers: headersFor('ref-1'), body: '{"amount":1}' });
    assert.equal(first.status, 201);
    assert.deepEqual(first.json(), { id: 1, state: 'new', version: 1 }, 'the first client gets the upstream\'s actual answer');
    assert.equal(first.headers.location, '/orders/1');

    const patched = await send(`${proxy.url}/orders/1`, { method: 'PATCH', headers: { authorization: AUTH }, body: '{"state":"paid"}' });
    assert.equal(patched.status, 200);

    const getsBefore = gets().length;
    const retry = await send(`${proxy.url}/orders`, { headers: headersFor('ref-1'), body: '{"amount":1}' });
    assert.equal(retry.status, 201, 'the original status');
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.deepEqual(retry.json(), { id: 1, state: 'paid', version: 2 }, 'the current state of the resource');
    assert.equal(retry.headers.location, '/orders/1', 'stored headers are replayed');
    assert.equal(retry.headers['x-order-service'], 'yes');
    assert.equal(retry.headers.etag, '"v2"', 'the current body\'s etag');
    assert.equal(retry.headers['last-modified'], new Date(1_700_000_002_000).toUTCString());
    assert.equal(retry.headers['content-length'], String(retry.body.length), 'the current body\'s length, from the GET');
    assertNoReserved(retry);
    assert.equal(posts('/orders'), 1, 'the POST executed once');

    const fetched = gets().slice(getsBefore);
    assert.equal(fetched.length, 1, 'one GET per replay');
    assert.equal(fetched[0]!.url, '/orders/1');
    assert.equal(fetched[0]!.headers.authorization, AUTH, 'the GET carries the tenant\'s credential header');
    assert.equal(fetched[0]!.headers['idempotency-key'], undefined, 'the GET carries no idempotency key');

    const r = await row('ref-1');
    assert.equal(r.state, 'complete');
    assert.equal(r.body_retained, false);
    assert.equal(r.response_body.length, 0, 'no body stored');
    assert.deepEqual(r.response_headers.at(-1), [REFERENCE_RECORD_HEADER, '/orders/1']);
  });

  test('an absolute Location on the upstream\'s origin is a reference too (query kept)', async () => {
    const first = await send(`${proxy.url}/orders?location=absolute`, { headers: headersFor('ref-abs'), body: '{}' });
    assert.equal(first.status, 201);
    const id = (first.json() as Order).id;
    await send(`${proxy.url}/orders/${id}`, { method: 'PATCH', headers: { authorization: AUTH }, body: '{"state":"shipped"}' });
    const retry = await send(`${proxy.url}/orders?location=absolute`, { headers: headersFor('ref-abs'), body: '{}' });
    assert.equal(retry.status, 201);
    assert.equal((retry.json() as Order).state, 'shipped');
    assert.equal(gets().at(-1)!.url, `/orders/${id}?view=full`);
  });

  test('the admin API and keys show present the record kind, not the reserved header', async () => {
    const view = await send(`${proxy.adminUrl}/admin/keys/${encodeURIComponent((await tenantOf('ref-1')))}/ref-1`, { method: 'GET' });
    assert.equal(view.status, 200, view.text());
    const v = view.json() as { record: string; reference: string; responseHeaders: Array<[string, string]> };
    assert.equal(v.record, 'reference');
    assert.equal(v.reference, '/orders/1');
    assert.ok(!v.responseHeaders.some(([n]) => n === REFERENCE_RECORD_HEADER), 'the reserved entry is not shown as a header');
    const list = await send(`${proxy.adminUrl}/admin/keys?route=orders`, { method: 'GET' });
    const keys = (list.json() as { keys: Array<{ key: string; record: string }> }).keys;
    assert.equal(keys.find((k) => k.key === 'ref-1')?.record, 'reference');
    const cli = await runCli(['keys', 'show', '--database-url', db.url, '--tenant-id', await tenantOf('ref-1'), '--key', 'ref-1']);
    assert.equal(cli.code, 0, cli.stderr);
    const shown = JSON.parse(cli.stdout) as { record: string; reference: string; responseHeaders: Array<[string, string]> };
    assert.equal(shown.record, 'reference');
    assert.equal(shown.reference, '/orders/1');
    assert.ok(!shown.responseHeaders.some(([n]) => n === REFERENCE_RECORD_HEADER));
  });

  async function tenantOf(key: string): Promise<string> {
    return ((await sql(db.url, 'SELECT tenant_id FROM idempotency_keys WHERE idem_key = $1', [key]))[0] as { tenant_id: string }).tenant_id;
  }

  test('an answer without Location is stored and replayed in full', async () => {
    const first = await send(`${proxy.url}/orders?location=none`, { headers: headersFor('ref-noloc'), body: '{}' });
    assert.equal(first.status, 201);
    const id = (first.json() as Order).id;
    await send(`${proxy.url}/orders/${id}`, { method: 'PATCH', headers: { authorization: AUTH }, body: '{"state":"paid"}' });
    const getsBefore = gets().length;
    const retry = await send(`${proxy.url}/orders?location=none`, { headers: headersFor('ref-noloc'), body: '{}' });
    assert.equal(retry.status, 201);
    assert.ok(retry.body.equals(first.body), 'the stored body, byte for byte');
    assert.equal(gets().length, getsBefore, 'nothing fetched');
    assert.equal((await row('ref-noloc')).body_retained, true);
    const view = await send(`${proxy.adminUrl}/admin/keys/${encodeURIComponent(await tenantOf('ref-noloc'))}/ref-noloc`, { method: 'GET' });
    assert.equal((view.json() as { record: string }).record, 'full');
  });

  test('a Location on another origin is never followed: stored in full', async () => {
    const first = await send(`${proxy.url}/orders?location=other-origin`, { headers: headersFor('ref-other'), body: '{}' });
    assert.equal(first.status, 201);
    const id = (first.json() as Order).id;
    await send(`${proxy.url}/orders/${id}`, { method: 'PATCH', headers: { authorization: AUTH }, body: '{"state":"paid"}' });
    const getsBefore = gets().length;
    const retry = await send(`${proxy.url}/orders?location=other-origin`, { headers: headersFor('ref-other'), body: '{}' });
    assert.equal(retry.status, 201);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.ok(retry.body.equals(first.body), 'the stored body');
    assert.equal(retry.headers.location, `http://127.0.0.1:1/orders/${id}`);
    assert.equal(gets().length, getsBefore, 'nothing fetched');
    assert.equal((await row('ref-other')).body_retained, true);
  });

  test('a non-2xx answer with a Location is stored in full', async () => {
    const first = await send(`${proxy.url}/orders?location=error`, { headers: headersFor('ref-409'), body: '{}' });
    assert.equal(first.status, 409);
    const retry = await send(`${proxy.url}/orders?location=error`, { headers: headersFor('ref-409'), body: '{}' });
    assert.equal(retry.status, 409);
    assert.ok(retry.body.equals(first.body));
    assert.equal((await row('ref-409')).body_retained, true);
  });

  test('a client that leaves while the GET runs changes nothing: the proxy goes on, the next retry replays', async () => {
    const first = await send(`${proxy.url}/orders`, { headers: headersFor('ref-leave'), body: '{}' });
    const id = (first.json() as Order).id;
    for (const mode of ['slow', 'trickle'] as const) {
      // Gone before the GET answers, then while its answer is being relayed.
      svc.getMode.set(id, mode);
      const wait = 150;
      await assert.rejects(request(`${proxy.url}/orders`, {
        method: 'POST', headers: headersFor('ref-leave'), body: '{}', signal: AbortSignal.timeout(wait),
      }).then((r) => r.body.text()));
    }
    await sleep(500);
    svc.getMode.delete(id);
    const retry = await send(`${proxy.url}/orders`, { headers: headersFor('ref-leave'), body: '{}' });
    assert.equal(retry.status, 201);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.equal(upstream.received.filter((r) => r.method === 'POST' && r.headers['idempotency-key'] === 'ref-leave').length, 1, 'the POST executed once');
  });

  test('the GET failing: 502 reference-unavailable with Retry-After, the key stays complete, nothing re-executes; once it answers again, the replay works', async () => {
    const first = await send(`${proxy.url}/orders`, { headers: headersFor('ref-fail'), body: '{"amount":5}' });
    assert.equal(first.status, 201);
    const id = (first.json() as Order).id;
    const path = '/orders';
    const postsBefore = posts(path);

    for (const mode of ['fail', 'reset'] as const) {
      svc.getMode.set(id, mode);
      const r = await send(`${proxy.url}/orders`, { headers: headersFor('ref-fail'), body: '{"amount":5}' });
      assert.equal(r.status, 502, `${mode}: ${r.text()}`);
      assert.equal(problemType(r), 'reference-unavailable');
      assert.equal(r.headers['retry-after'], '1');
      const p = r.json() as { retryable: boolean; originalStatus: number; referenceStatus?: number };
      assert.equal(p.retryable, true);
      assert.equal(p.originalStatus, 201);
      if (mode === 'fail') assert.equal(p.referenceStatus, 503);
      assert.equal(r.headers['idempotent-replayed'], undefined, 'a problem, not a replay');
      assert.equal((await row('ref-fail')).state, 'complete', 'the key stays complete');
    }
    assert.equal(posts(path), postsBefore, 'never re-executed');

    // The current body breaks off after the status line went out: the client never sees a short body as complete.
    svc.getMode.set(id, 'break');
    await assert.rejects(send(`${proxy.url}/orders`, { headers: headersFor('ref-fail'), body: '{"amount":5}' }));
    assert.equal((await row('ref-fail')).state, 'complete');
    assert.equal(posts(path), postsBefore, 'never re-executed');

    svc.getMode.delete(id);
    await send(`${proxy.url}/orders/${id}`, { method: 'PATCH', headers: { authorization: AUTH }, body: '{"state":"refunded"}' });
    const back = await send(`${proxy.url}/orders`, { headers: headersFor('ref-fail'), body: '{"amount":5}' });
    assert.equal(back.status, 201);
    assert.equal(back.headers['idempotent-replayed'], 'true');
    assert.equal((back.json() as Order).state, 'refunded');

    svc.getMode.set(id, 'gone');
    const gone = await send(`${proxy.url}/orders`, { headers: headersFor('ref-fail'), body: '{"amount":5}' });
    assert.equal(gone.status, 410);
    assert.equal(problemType(gone), 'reference-gone');
    assert.equal((gone.json() as { retryable: boolean }).retryable, false);
    assert.equal(posts(path), postsBefore, 'still never re-executed');
    assertNoReserved(gone);
  });
});

test('record: validation names the field', () => {
  for (const [text, where] of [
    ['routes:\n  - name: a\n    match: { path: /a/** }\n    record: partial\n', 'routes[0].record'],
    ['defaults:\n  record: body\n', 'defaults.record'],
  ] as const) {
    try {
      loadConfig({ text, flags: { upstream: 'http://127.0.0.1:3000' }, env: {} });
      assert.fail('expected a ConfigError');
    } catch (err) {
      assert.ok(err instanceof ConfigError, String(err));
      const line = err.errors.find((e) => e.startsWith(where));
      assert.ok(line !== undefined, `an error naming ${where}: ${err.errors.join('; ')}`);
      assert.match(line, /full|reference/);
    }
  }
  const plain = loadConfig({ text: 'routes:\n  - name: a\n    match: { path: /a/** }\n', flags: { upstream: 'http://127.0.0.1:3000' }, env: {} });
  assert.equal(plain.routes[0]!.record, 'full', 'the default');
  const ok = loadConfig({ text: 'defaults:\n  record: reference\nroutes:\n  - name: a\n    match: { path: /a/** }\n  - name: b\n    match: { path: /b/** }\n    record: full\n', flags: { upstream: 'http://127.0.0.1:3000' }, env: {} });
  assert.deepEqual(ok.routes.map((r) => r.record), ['reference', 'full']);
});

describe('record: reference with the tenant from its own header', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const svc = orderService();

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(svc.responder);
    svc.setOrigin(upstream.url);
    proxy = await startTestProxy({
      upstream: upstream.url,
      databaseUrl: db.url,
      yaml: 'routes:\n  - name: orders\n    match: { path: "/orders/**" }\n    record: reference\n    tenant: { fromHeader: x-account }\n',
    });
  });

  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('the GET carries the client\'s Authorization and the tenant\'s header', async () => {
    const headers = { ...headersFor('ref-acct'), 'x-account': 'acct_7' };
    const first = await send(`${proxy.url}/orders`, { headers, body: '{"amount":1}' });
    assert.equal(first.status, 201);
    const before = upstream.received.length;
    const retry = await send(`${proxy.url}/orders`, { headers, body: '{"amount":1}' });
    assert.equal(retry.status, 201);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    const [get] = upstream.received.slice(before).filter((r) => r.method === 'GET');
    assert.ok(get !== undefined, 'the replay GETs the reference');
    assert.equal(get.headers.authorization, AUTH, 'the client\'s credential');
    assert.equal(get.headers['x-account'], 'acct_7', 'the tenant\'s header');
  });
});

// The replay's GET waits for a connection like any upstream request: upstream.timeout bounds that wait and the
// wait for the answer's status line, with the proxy's own timer. One upstream connection, held by a
// pass-through download (1.6 s) while a replay's GET waits behind it.
describe('record: reference, a replay while every upstream connection is busy', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const hits = (method: string, path: string): number => upstream.received.filter((r) => r.method === method && r.url === path).length;

  before(async () => {
    db = await createTestDatabase();
    upstream = await startDownloadUpstream((req, _n, res) => {
      res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json', ...(req.method === 'POST' ? { location: '/items/1' } : {}) });
      res.end(JSON.stringify({ id: 1, fetched: req.method === 'GET' }));
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: oneConnectionYaml('400ms', 'record: reference') });
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('a GET that gets no connection within upstream.timeout: 502 reference-unavailable at the deadline, never sent; the next replay fetches', async () => {
    const post = () => send(`${proxy.url}/orders/r-1`, { headers: { 'content-type': 'application/json', 'idempotency-key': 'r-1' }, body: '{}' });
    assert.equal((await post()).status, 201);
    const download = send(`${proxy.url}/download`, { method: 'GET' });
    await waitFor('the download to hold the one connection', () => hits('GET', '/download') === 1);
    const t0 = performance.now();
    const replay = await post();
    const waited = performance.now() - t0;
    assert.equal(replay.status, 502);
    assert.equal(problemType(replay), 'reference-unavailable');
    assert.ok(waited < 1200, `answered at the deadline, not when the connection freed (${Math.round(waited)} ms)`);
    assert.equal((await download).body.length, DOWNLOAD_BYTES);
    // The GET waiting was dropped unsent when the download ended: a request sent after it is answered after that.
    assert.equal((await send(`${proxy.url}/download`, { method: 'GET' })).status, 200);
    assert.equal(hits('GET', '/items/1'), 0, 'the GET that waited too long never reached the upstream');
    const again = await post();
    assert.equal(again.status, 201);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.deepEqual(again.json(), { id: 1, fetched: true });
    assert.equal(hits('POST', '/orders/r-1'), 1, 'the operation ran once');
  });
});

