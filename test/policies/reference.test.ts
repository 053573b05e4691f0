// record: reference — a 2xx answer with a Location on the upstream is stored
// as status and headers with a reference; a replay GETs the Location from the
// upstream (with the tenant's credential header) and answers the original
// status with the resource's CURRENT body. The operation never runs twice,
// whatever the GET gives. Real PostgreSQL, Redis and an order service over HTTP.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import type { RunningProxy } from '../../src/app.js';
import { ConfigError } from '../../src/config/errors.js';
import { loadConfig } from '../../src/config/load.js';
import { REFERENCE_RECORD_HEADER, TRACE_RECORD_HEADER } from '../../src/proxy/headers.js';
import { decode, encodeComplete } from '../../src/store/cache-codec.js';
import { ADMIN_URL, createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { runCli, startTestProxy } from '../helpers/proxy.js';
import { deletePrefix, sharedRedis, uniquePrefix } from '../helpers/redis.js';
import { startUpstream, type Received, type TestUpstream } from '../helpers/upstream.js';
import { LOADED_MACHINE_TIMEOUT_MS, cacheCounts, claimCount } from '../cache/helpers/proxy.js';
import { problemType } from './support.js';
import { sleep } from '../helpers/wait.js';
import { request } from 'undici';

const YAML = `
routes:
  - name: orders
    match: { path: "/orders/**" }
    record: reference
`;

interface Order { id: number; state: string; version: number }

/** An order service: POST creates (201 + Location), PATCH changes, GET shows; `getMode` breaks the GET of one order. */
function orderService() {
  const orders = new Map<number, Order>();
  const getMode = new Map<number, 'fail' | 'reset' | 'gone' | 'slow' | 'trickle' | 'break'>();
  let next = 1;
  const json = (res: import('node:http').ServerResponse, status: number, o: Order, extra: Record<string, string> = {}): void => {
    const body = JSON.stringify(o);
    res.writeHead(status, {
      'content-length': String(Buffer.byteLength(body)),
      'content-type': 'application/json', etag: `"v${o.version}"`, 'last-modified': new Date(1_700_000_000_000 + o.version * 1000).toUTCString(),
      'x-order-service': 'yes', ...extra,
    });
    res.end(body);
  };
  const responder = async (req: Received, _n: number, res: import('node:http').ServerResponse): Promise<void> => {
    const url = new URL(req.url, 'http://x');
    const id = Number(url.pathname.split('/')[2]);
    if (req.method === 'POST') {
      const o: Order = { id: next++, state: 'new', version: 1 };
      orders.set(o.id, o);
      const kind = url.searchParams.get('location');
      if (kind === 'none') return json(res, 201, o);
      if (kind === 'other-origin') return json(res, 201, o, { location: `http://127.0.0.1:1/orders/${o.id}` });
      if (kind === 'error') return json(res, 409, o, { location: `/orders/${o.id}` });
      if (kind === 'absolute') return json(res, 201, o, { location: `${origin}/orders/${o.id}?view=full` });
      return json(res, 201, o, { location: `/orders/${o.id}` });
    }
    const o = orders.get(id);
    if (o === undefined) {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('no such order');
      return;
    }
    if (req.method === 'PATCH') {
      Object.assign(o, JSON.parse(req.body.toString()) as Partial<Order>, { version: o.version + 1 });
      return json(res, 200, o);
    }
    const mode = getMode.get(id);
    if (mode === 'slow') await sleep(400);
    if (mode === 'break') {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
      res.write('{"id":');
      await sleep(50);
      res.socket?.destroy();
      return;
    }
    if (mode === 'trickle') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"id":');
      await sleep(400);
      res.end(`${o.id}}`);
      return;
    }
    if (mode === 'reset') return void res.socket?.destroy();
    if (mode === 'fail') {
      res.writeHead(503, { 'content-type': 'text/plain' });
      res.end('down for maintenance');
      return;
    }
    if (mode === 'gone') {
      res.writeHead(410, { 'content-type': 'text/plain' });
      res.end('deleted');
      return;
    }
    json(res, 200, o);
  };
  let origin = '';
  return { orders, getMode, responder, setOrigin: (o: string) => { origin = o; } };
}

const AUTH = 'Bearer sk_test_reference';
const headersFor = (key: string): Record<string, string> => ({ 'idempotency-key': key, authorization: AUTH, 'content-type': 'application/json' });

function assertNoReserved(r: Reply): void {
  for (const name of Object.keys(r.headers)) {
    assert.ok(name !== REFERENCE_RECORD_HEADER && name !== TRACE_RECORD_HEADER, `reserved header ${name} reached the client`);
  }
}

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

describe('record: reference served from the Redis cache', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let redis: Redis;
  const prefix = uniquePrefix();
  const svc = orderService();

  before(async () => {
    redis = await sharedRedis();
    db = await createTestDatabase();
    upstream = await startUpstream(svc.responder);
    proxy = await startTestProxy({
      upstream: upstream.url, databaseUrl: db.url, redisUrl: 'redis://127.0.0.1:6379', yaml: YAML,
      start: { redisCache: { prefix, commandTimeoutMs: LOADED_MACHINE_TIMEOUT_MS } },
    });
  });

  after(async () => {
    await proxy?.close();
    await upstream?.close();
    if (redis !== undefined) {
      await deletePrefix(redis, prefix);
      redis.disconnect();
    }
    await db?.drop();
  });

  test('the cache holds the reference; the replay fetches the current body without PostgreSQL', async () => {
    const first = await send(`${proxy.url}/orders`, { headers: headersFor('ref-cache'), body: '{"amount":2}' });
    assert.equal(first.status, 201);
    const id = (first.json() as Order).id;
    // The PATCH goes to the upstream directly: PostgreSQL is about to be blocked.
    await send(`${upstream.url}/orders/${id}`, { method: 'PATCH', body: '{"state":"paid"}' });

    await sql(ADMIN_URL, `ALTER DATABASE ${db.name} ALLOW_CONNECTIONS false`);
    try {
      await sql(ADMIN_URL, 'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [db.name]);
      const hits = (await cacheCounts(proxy.metrics)).hit;
      const claims = await claimCount(proxy.metrics);
      const retry = await send(`${proxy.url}/orders`, { headers: headersFor('ref-cache'), body: '{"amount":2}' });
      assert.equal(retry.status, 201);
      assert.equal(retry.headers['idempotent-replayed'], 'true');
      assert.deepEqual(retry.json(), { id, state: 'paid', version: 2 });
      assertNoReserved(retry);
      assert.equal((await cacheCounts(proxy.metrics)).hit, hits + 1, 'a cache hit');
      assert.equal(await claimCount(proxy.metrics), claims, 'no claim statement ran');
    } finally {
      await sql(ADMIN_URL, `ALTER DATABASE ${db.name} ALLOW_CONNECTIONS true`);
    }
    assert.equal(upstream.received.filter((r) => r.method === 'POST').length, 1, 'the POST executed once');
    assert.equal(upstream.received.filter((r) => r.method === 'GET').at(-1)!.headers.authorization, AUTH);
  });

  test('the cache codec keeps the reserved entries of a reference record', () => {
    const rec = {
      status: 201,
      headers: [['location', '/orders/7'], [REFERENCE_RECORD_HEADER, '/orders/7'], [TRACE_RECORD_HEADER, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01']] as Array<[string, string]>,
      body: Buffer.alloc(0),
      bodyRetained: false,
      bodySize: 42,
    };
    const fp = Buffer.alloc(32, 7);
    const hit = decode(encodeComplete(fp, rec, Date.now() + 60_000), Date.now());
    assert.ok(hit !== null && hit.kind === 'complete');
    assert.deepEqual(hit.response.headers, rec.headers);
    assert.equal(hit.response.bodyRetained, false);
    assert.equal(hit.response.bodySize, 42);
    assert.equal(hit.response.body.length, 0);
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
