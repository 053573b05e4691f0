// The admin API for keys on the admin listener of a real proxy, over a real
// PostgreSQL table of 10 500 records: listing with every filter, paged to the
// end (no key twice, none skipped), the bearer token (without it every key
// call is 401 and no row changes), bad input answered with a problem naming
// the field, the audit log line, the loopback rule without a token, and the
// census gauges on /metrics.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { startProxy } from '../../src/app.js';
import { encodeCursor, parseListQuery } from '../../src/admin/query.js';
import { loadConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/log/logger.js';
import { createTestDatabase, sql, whileRefusing, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { metric } from '../helpers/metrics.js';
import { waitFor } from '../helpers/wait.js';
import { cliInProcess } from './support.js';

const TOKEN = 'adm-7c1f-secret';
const N = 10_500;
const TENANTS = ['acme', 'globex', 'initech', 'umbrella'];
const ROUTES = ['payments', 'refunds', 'webhooks'];
const STATES = ['complete', 'complete', 'complete', 'in_flight', 'outcome_unknown', 'complete', 'complete'];

interface Row { tenant: string; key: string; state: string; route: string; ageS: number }

/** The rows the test inserts, known to the test: the expected answers come from here, not from SQL. */
function rowsOf(): Row[] {
  const out: Row[] = [];
  for (let i = 0; i < N; i++) {
    const late = i >= N - 3; // last in key order, on a route of their own: found only past the first scan bound
    out.push({
      tenant: late ? 'zzz-late' : TENANTS[i % TENANTS.length]!,
      // keys with characters a path must percent-encode, and a shared prefix
      key: i % 97 === 0 ? `k/${i}?x=1 %` : `k-${String(i).padStart(6, '0')}`,
      state: STATES[i % STATES.length]!,
      route: late ? 'rare' : ROUTES[i % ROUTES.length]!,
      ageS: (i % 10) * 600, // 0 .. 90 min old
    });
  }
  return out;
}

let db: TestDatabase;
let upstream: TestUpstream;
let proxy: RunningProxy;
const lines: Array<Record<string, unknown>> = [];
const rows = rowsOf();

const call = (path: string, opts: { method?: string; token?: string | null; body?: string; type?: string } = {}): Promise<Reply> => {
  const headers: Record<string, string> = {};
  if (opts.token !== null) headers.authorization = `Bearer ${opts.token ?? TOKEN}`;
  if (opts.type !== undefined) headers['content-type'] = opts.type;
  return send(`${proxy.adminUrl}${path}`, { method: opts.method ?? 'GET', headers, ...(opts.body === undefined ? {} : { body: opts.body }) });
};

async function listAll(query: string, limit: number): Promise<Array<{ tenantId: string; key: string; state: string }>> {
  const seen: Array<{ tenantId: string; key: string; state: string }> = [];
  let cursor: string | null = null;
  for (let pages = 0; ; pages++) {
    assert.ok(pages < 200, 'the listing ends');
    const r = await call(`/admin/keys?${query}&limit=${limit}${cursor === null ? '' : `&cursor=${cursor}`}`);
    assert.equal(r.status, 200, r.text());
    const page = r.json() as { keys: Array<{ tenantId: string; key: string; state: string; bodyBase64?: string }>; next: string | null; scanned: number };
    assert.ok(page.keys.length <= limit);
    assert.ok(page.scanned <= 10_000, 'each page examines a bounded number of rows');
    for (const k of page.keys) assert.ok(!('bodyBase64' in k), 'no body unless asked');
    seen.push(...page.keys);
    if (page.next === null) return seen;
    cursor = page.next;
  }
}

/** A cursor as the API makes one for a listing without filters (src/admin/query.ts), whatever it holds. */
function cursorOf([tenantId, key]: [string, string]): string {
  return encodeCursor({ tenantId, key }, parseListQuery({}).filterTag);
}

function expectSame(got: Array<{ tenantId: string; key: string }>, want: Row[], what: string): void {
  const ids = got.map((k) => `${k.tenantId}\u0000${k.key}`);
  assert.equal(new Set(ids).size, ids.length, `${what}: no key twice`);
  assert.deepEqual(new Set(ids), new Set(want.map((r) => `${r.tenant}\u0000${r.key}`)), `${what}: none skipped, none extra`);
}

before(async () => {
  db = await createTestDatabase();
  upstream = await startUpstream();
  // 10 500 records across tenants, routes, states and ages, in one statement.
  await sql(db.url, `
    INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, state, owner_token, on_expired_lease, locked_until,
                                  expires_at, created_at, completed_at, status_code, response_headers, response_body,
                                  body_retained, body_size, route, method, path)
    SELECT t, k, '\\x00'::bytea, s, gen_random_uuid(), 'fail',
           CASE WHEN s = 'in_flight' THEN now() + interval '1 hour' END,
           now() + interval '1 day', now() - a * interval '1 second',
           CASE WHEN s = 'complete' THEN now() END, CASE WHEN s = 'complete' THEN 201 END,
           CASE WHEN s = 'complete' THEN '[["content-type","application/json"]]'::jsonb END,
           CASE WHEN s = 'complete' THEN convert_to('{"secret":"body"}', 'UTF8') END,
           CASE WHEN s = 'complete' THEN true END, CASE WHEN s = 'complete' THEN 17 END,
           r, 'POST', '/v1/x'
      FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[]) AS u(t, k, s, r, a)`,
  [rows.map((r) => r.tenant), rows.map((r) => r.key), rows.map((r) => r.state), rows.map((r) => r.route), rows.map((r) => r.ageS)]);
  const config = loadConfig({
    text: `adminToken: ${TOKEN}\n`,
    flags: { upstream: upstream.url, listen: '127.0.0.1:0', admin: '127.0.0.1:0', databaseUrl: db.url, redisUrl: null },
    env: {},
  });
  const logger = createLogger('info', { write: (s: string) => { for (const l of s.split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l)); } });
  proxy = await startProxy(config, { logger, census: { intervalMs: 50, chunkRows: 4000 } });
});

after(async () => {
  await proxy?.close();
  await upstream?.close();
  await db?.drop();
});

describe('listing', () => {
  test('every key, paged by 700: no page repeats a key, none is skipped', async () => {
    expectSame(await listAll('', 700), rows, 'all');
  });

  test('each filter, and filters together, paged to the end', async () => {
    const cases: Array<[string, (r: Row) => boolean]> = [
      ['state=outcome_unknown', (r) => r.state === 'outcome_unknown'],
      ['state=in_flight', (r) => r.state === 'in_flight'],
      ['state=complete', (r) => r.state === 'complete'],
      ['route=refunds', (r) => r.route === 'refunds'],
      ['route=rare', (r) => r.route === 'rare'],
      ['tenantId=globex', (r) => r.tenant === 'globex'],
      ['olderThan=1h', (r) => r.ageS >= 3600],
      ['state=outcome_unknown&tenantId=initech&olderThan=30m&route=payments',
        (r) => r.state === 'outcome_unknown' && r.tenant === 'initech' && r.ageS >= 1800 && r.route === 'payments'],
    ];
    for (const [query, pred] of cases) {
      const want = rows.filter(pred);
      assert.ok(want.length > 0, `${query} matches something`);
      expectSame(await listAll(query, 250), want, query);
    }
  });

  test('a selective filter costs bounded scans: an empty page can still have a next', async () => {
    const first = (await call('/admin/keys?route=rare&limit=10')).json();
    assert.deepEqual(first.keys, [], 'none among the first 10 000 rows');
    assert.equal(first.scanned, 10_000);
    assert.notEqual(first.next, null);
    const second = (await call(`/admin/keys?route=rare&limit=10&cursor=${first.next}`)).json();
    assert.equal(second.keys.length, 3);
    assert.equal(second.next, null);
  });

  test('the CLI pages through the same listing: keys list --all --json', async () => {
    const r = await cliInProcess(['keys', 'list', '--database-url', db.url, '--state', 'outcome_unknown', '--route', 'payments', '--limit', '300', '--all', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const pages = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as { keys: Array<{ tenantId: string; key: string }> });
    assert.ok(pages.length > 1, 'several pages');
    expectSame(pages.flatMap((p) => p.keys), rows.filter((x) => x.state === 'outcome_unknown' && x.route === 'payments'), 'keys list --all');
    const text = await cliInProcess(['keys', 'list', '--database-url', db.url, '--tenant-id', 'zzz-late']);
    assert.equal(text.code, 0, text.stderr);
    assert.equal(text.stdout.trim().split('\n').length, 3);
    assert.match(text.stdout, /^complete +\d+[smhd] +rare +"zzz-late" +"k-010498" +POST \/v1\/x +201$/m);
  });

  test('a page shows the record, never the body unless asked', async () => {
    const r = await call('/admin/keys?tenantId=acme&state=complete&limit=3&body=true');
    assert.equal(r.status, 200);
    const k = r.json().keys[0];
    assert.equal(k.state, 'complete');
    assert.equal(k.status, 201);
    assert.equal(Buffer.from(k.bodyBase64, 'base64').toString(), '{"secret":"body"}');
    const plain = await call('/admin/keys?tenantId=acme&state=complete&limit=3');
    assert.ok(!plain.text().includes('secret'));
  });

  test('show and purge one key (percent-encoded path)', async () => {
    const key = rows[97]!;
    const path = `/admin/keys/${encodeURIComponent(key.tenant)}/${encodeURIComponent(key.key)}`;
    const shown = await call(path);
    assert.equal(shown.status, 200, shown.text());
    assert.equal(shown.json().key, key.key);
    assert.equal(shown.json().state, key.state);
    assert.ok(!('bodyBase64' in shown.json()));
    const purged = await call(path, { method: 'DELETE' });
    assert.equal(purged.status, 200);
    assert.equal(purged.json().was, key.state);
    assert.equal((await call(path)).status, 404);
    assert.equal((await sql(db.url, 'SELECT 1 FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2', [key.tenant, key.key])).length, 0);
    const idx = rows.indexOf(key);
    rows.splice(idx, 1);
  });
});

describe('the bearer token', () => {
  test('without it (or with a wrong one) every key call is 401 and no row changes', async () => {
    const snapshot = async () => sql<{ n: string; h: string }>(db.url,
      "SELECT count(*) AS n, md5(string_agg(tenant_id || idem_key || state || coalesce(status_code, 0), ',' ORDER BY tenant_id, idem_key)) AS h FROM idempotency_keys");
    const before = await snapshot();
    const unknown = rows.find((r) => r.state === 'outcome_unknown')!;
    const one = `/admin/keys/${encodeURIComponent(unknown.tenant)}/${encodeURIComponent(unknown.key)}`;
    for (const token of [null, 'wrong', `${TOKEN}x`]) {
      const calls: Array<[string, { method?: string; body?: string; type?: string }]> = [
        ['/admin/keys', {}], ['/admin/keys?state=outcome_unknown', {}], [one, {}], [one, { method: 'DELETE' }],
        [`${one}/resolve`, { method: 'POST', body: '{"as":"executed"}', type: 'application/json' }],
        [`${one}/resolve`, { method: 'POST', body: '{"as":"not_executed"}', type: 'application/json' }],
      ];
      for (const [path, opts] of calls) {
        const r = await call(path, { ...opts, token });
        assert.equal(r.status, 401, `${opts.method ?? 'GET'} ${path} with ${token}`);
        assert.equal(r.headers['content-type'], 'application/problem+json');
        assert.match(String(r.headers['www-authenticate']), /^Bearer/);
        assert.ok(!r.text().includes(unknown.key), 'nothing about the key is revealed');
      }
    }
    assert.deepEqual(await snapshot(), before, 'no key touched');
  });
});

describe('bad input gets a problem naming the field', () => {
  const cases: Array<[string, string, { method?: string; body?: string; type?: string }?]> = [
    ['/admin/keys?state=stuck', 'state'],
    ['/admin/keys?cursor=not-a-cursor', 'cursor'],
    ['/admin/keys?cursor=W1siYSJd', 'cursor'],
    ['/admin/keys?tenantId=nobody-here', 'tenantId'],
    ['/admin/keys?olderThan=yesterday', 'olderThan'],
    // An age past PostgreSQL's first timestamp was its error, 'timestamp out of range'.
    ['/admin/keys?olderThan=100000000d', 'olderThan'],
    ['/admin/keys?limit=0', 'limit'],
    ['/admin/keys?limit=5000', 'limit'],
    ['/admin/keys?body=yes', 'body'],
    ['/admin/keys?colour=red', 'colour'],
    ['/admin/keys?state=complete&state=in_flight', 'state'],
    ['/admin/keys/acme/%E0%A4%A', 'key'],
    ['/admin/keys/acme/k-000000/resolve', 'as', { method: 'POST', body: '{"as":"maybe"}', type: 'application/json' }],
    ['/admin/keys/acme/k-000000/resolve', 'body', { method: 'POST', body: '{"as":', type: 'application/json' }],
    ['/admin/keys/acme/k-000000/resolve', 'force', { method: 'POST', body: '{"as":"executed","force":true}', type: 'application/json' }],
    // U+0000 cannot be in PostgreSQL's text: a 400 naming the field, not an SQL error answered 503 "store unavailable"
    ['/admin/keys?tenantId=acme%00', 'tenantId'],
    ['/admin/keys?route=pay%00ments', 'route'],
    [`/admin/keys?cursor=${cursorOf(['acme\u0000', 'k-000000'])}`, 'cursor'],
    ['/admin/keys/acme%00/k-000000', 'tenantId'],
    ['/admin/keys/acme/k-000000%00', 'key', { method: 'DELETE' }],
    ['/admin/keys/acme/k-000004%00/resolve', 'key', { method: 'POST', body: '{"as":"executed"}', type: 'application/json' }],
  ];
  for (const [path, field, opts] of cases) {
    test(`${opts?.method ?? 'GET'} ${path} ${opts?.body ?? ''}`, async () => {
      const r = await call(path, opts ?? {});
      assert.ok(r.status === 400 || r.status === 404, `${r.status} ${r.text()}`);
      if (path.includes('%00') || field === 'cursor') assert.equal(r.status, 400, r.text());
      assert.equal(r.headers['content-type'], 'application/problem+json');
      const p = r.json();
      assert.match(p.type, /^urn:idempotency-proxy:problem:admin-/);
      assert.equal(p['invalid-params'][0].name, field);
      assert.match(p.detail, new RegExp(`^${field}: `));
    });
  }

  test('a cursor made for other filters is refused', async () => {
    const first = (await call('/admin/keys?state=complete&limit=5')).json();
    const r = await call(`/admin/keys?state=in_flight&limit=5&cursor=${first.next}`);
    assert.equal(r.status, 400);
    assert.equal(r.json()['invalid-params'][0].name, 'cursor');
  });

  test('resolve of a key that is not outcome_unknown: 409 naming its state; without JSON: 415', async () => {
    const done = rows.find((r) => r.state === 'complete')!;
    const path = `/admin/keys/${encodeURIComponent(done.tenant)}/${encodeURIComponent(done.key)}/resolve`;
    const r = await call(path, { method: 'POST', body: '{"as":"not_executed"}', type: 'application/json' });
    assert.equal(r.status, 409);
    assert.equal(r.json().state, 'complete');
    assert.equal((await call(path, { method: 'POST', body: 'as=executed', type: 'text/plain' })).status, 415);
    assert.equal((await call('/admin/keys/acme/nope/resolve', { method: 'POST', body: '{"as":"executed"}', type: 'application/json' })).status, 404);
    assert.equal((await sql(db.url, 'SELECT state FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2', [done.tenant, done.key]))[0]?.state, 'complete');
  });
});

test('an SQL error that is not an outage is a 500, an outage 503 with Retry-After; the key stays as it was', async () => {
  const k = rows.find((r) => r.state === 'complete' && r.tenant === 'umbrella')!;
  const path = `/admin/keys/${encodeURIComponent(k.tenant)}/${encodeURIComponent(k.key)}`;
  const when = `OLD.tenant_id = 'umbrella' AND OLD.idem_key = '${k.key}'`;
  const state = async (): Promise<unknown> => (await sql(db.url, 'SELECT state FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2', [k.tenant, k.key]))[0]?.state;
  await whileRefusing(db.url, { code: '23514', when, on: 'DELETE' }, async () => {
    const r = await call(path, { method: 'DELETE' });
    assert.equal(r.status, 500, r.text());
    assert.equal(r.json().type, 'urn:idempotency-proxy:problem:admin-internal-error');
    assert.equal(r.headers['retry-after'], undefined);
  });
  await whileRefusing(db.url, { code: '57P01', when, on: 'DELETE' }, async () => {
    const r = await call(path, { method: 'DELETE' });
    assert.equal(r.status, 503, r.text());
    assert.equal(r.json().type, 'urn:idempotency-proxy:problem:admin-store-unavailable');
    assert.equal(r.headers['retry-after'], '1');
  });
  assert.equal(await state(), 'complete', 'neither purge removed the record');
});

test('every call is logged with who and what', async () => {
  const from = lines.length;
  await call('/admin/keys?state=outcome_unknown&limit=2');
  await call('/admin/keys?state=outcome_unknown', { token: 'wrong' });
  await waitFor('two admin log lines', () => lines.length >= from + 2, 2000);
  const [ok, denied] = lines.slice(from).filter((l) => l.msg === 'admin call');
  assert.equal(ok!.op, 'list');
  assert.equal(ok!.status, 200);
  assert.deepEqual((ok!.filters as Record<string, unknown>).state, 'outcome_unknown');
  const who = ok!.who as { token: string; remote: string };
  assert.match(who.token, /^sha256:[0-9a-f]{12}$/);
  assert.match(who.remote, /^127\.0\.0\.1:\d+$/);
  assert.equal(denied!.status, 401);
  assert.notEqual((denied!.who as { token: string }).token, who.token, 'the wrong token has another fingerprint');
  assert.ok(!JSON.stringify(lines).includes(TOKEN), 'the token itself is never logged');
});

test('census gauges: outcome-unknown keys and the oldest in-flight key\'s age', async () => {
  const want = rows.filter((r) => r.state === 'outcome_unknown').length;
  const oldest = Math.max(...rows.filter((r) => r.state === 'in_flight').map((r) => r.ageS));
  let text = '';
  await waitFor('a census pass', async () => {
    text = (await call('/metrics')).text();
    return metric(text, 'idempotency_proxy_keys_outcome_unknown') > 0;
  }, 10_000);
  // The earlier tests resolve nothing and purge one complete key: the count is the inserted one.
  await waitFor(`${want} outcome-unknown keys`, async () => metric((await call('/metrics')).text(), 'idempotency_proxy_keys_outcome_unknown') === want, 10_000);
  const age = metric((await call('/metrics')).text(), 'idempotency_proxy_oldest_in_flight_age_seconds');
  assert.ok(age >= oldest && age < oldest + 60, `oldest in-flight age ${age} ≈ ${oldest}`);
});

describe('without adminToken', () => {
  test('on a non-loopback admin listener the key API is off (403), nothing is touched', async () => {
    const config = loadConfig({
      text: '',
      flags: { upstream: upstream.url, listen: '127.0.0.1:0', admin: '0.0.0.0:0', databaseUrl: db.url, redisUrl: null },
      env: {},
    });
    const open = await startProxy(config, { logger: createLogger('silent') });
    try {
      const port = new URL(open.adminUrl!).port;
      const base = `http://127.0.0.1:${port}`;
      const unknown = rows.find((r) => r.state === 'outcome_unknown')!;
      const one = `/admin/keys/${encodeURIComponent(unknown.tenant)}/${encodeURIComponent(unknown.key)}`;
      for (const [path, method] of [['/admin/keys', 'GET'], [one, 'GET'], [one, 'DELETE']] as const) {
        const r = await send(`${base}${path}`, { method });
        assert.equal(r.status, 403, `${method} ${path}`);
        assert.match(r.json().type, /admin-token-required/);
      }
      const r = await send(`${base}${one}/resolve`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"as":"not_executed"}' });
      assert.equal(r.status, 403);
      assert.equal((await sql(db.url, 'SELECT state FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2', [unknown.tenant, unknown.key]))[0]?.state, 'outcome_unknown');
      assert.equal((await send(`${base}/metrics`, { method: 'GET' })).status, 200, '/metrics stays as it was');
    } finally {
      await open.close();
    }
  });

  test('on a loopback admin listener the key API answers without a token', async () => {
    const config = loadConfig({
      text: '',
      flags: { upstream: upstream.url, listen: '127.0.0.1:0', admin: '127.0.0.1:0', databaseUrl: db.url, redisUrl: null },
      env: {},
    });
    const local = await startProxy(config, { logger: createLogger('silent') });
    try {
      const r = await send(`${local.adminUrl}/admin/keys?tenantId=acme&limit=1`, { method: 'GET' });
      assert.equal(r.status, 200, r.text());
      assert.equal(r.json().keys.length, 1);
    } finally {
      await local.close();
    }
  });
});
