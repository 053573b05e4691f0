import { describe, test, before, after } from 'node:test';
import { randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { hashTenant } from '../../src/policy/tenant.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { captureLogger, header, uniqueKey } from './support.js';
import { waitFor } from '../helpers/wait.js';

// docs/contract.md, step 3: keys are unique per (tenant, key). The same key under two
// tenants executes twice and each tenant replays its own answer. Raw
// credentials are never stored or logged.

const SECRET_A = 'Bearer sk_live_SECRET_alpha_0123456789';
const SECRET_B = 'Bearer sk_live_SECRET_bravo_9876543210';

const yaml = `
routes:
  - name: by-header
    match: { path: "/h/**" }
    tenant: { fromHeader: x-tenant }
  - name: by-credential
    match: { path: "/**" }
`;

describe('tenants', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const log = captureLogger('debug');
  const keys: string[] = [];
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201));
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml, logger: log.logger });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  async function twoTenants(path: string, a: Record<string, string>, b: Record<string, string>): Promise<void> {
    const key = uniqueKey('ten');
    keys.push(key);
    const n = upstream.executions();
    const [ra, rb] = await Promise.all([
      send(`${proxy.url}${path}`, { headers: { ...a, 'idempotency-key': key }, body: 'same body' }),
      send(`${proxy.url}${path}`, { headers: { ...b, 'idempotency-key': key }, body: 'same body' }),
    ]);
    assert.equal(ra.status, 201);
    assert.equal(rb.status, 201);
    assert.equal(upstream.executions(), n + 2, 'executed once per tenant');
    assert.notEqual(ra.json().execution, rb.json().execution);
    // Each tenant replays its own answer, never the other's.
    const [ra2, rb2] = await Promise.all([
      send(`${proxy.url}${path}`, { headers: { ...a, 'idempotency-key': key }, body: 'same body' }),
      send(`${proxy.url}${path}`, { headers: { ...b, 'idempotency-key': key }, body: 'same body' }),
    ]);
    assert.equal(header(ra2, 'idempotent-replayed'), 'true');
    assert.equal(header(rb2, 'idempotent-replayed'), 'true');
    assert.ok(ra2.body.equals(ra.body));
    assert.ok(rb2.body.equals(rb.body));
    assert.equal(upstream.executions(), n + 2);
  }

  test('fromHeader x-tenant: same key under two tenants runs twice, replays its own', async () => {
    await twoTenants('/h/pay', { 'x-tenant': 'acme' }, { 'x-tenant': 'globex' });
    const rows = await sql<{ tenant_id: string }>(db.url, "SELECT tenant_id FROM idempotency_keys WHERE route = 'by-header'");
    assert.deepEqual(rows.map((r) => r.tenant_id).sort(), ['acme', 'globex']);
  });

  test('a request without the tenant header belongs to the empty tenant, apart from the others', async () => {
    const key = uniqueKey('empty-tenant');
    const n = upstream.executions();
    await send(`${proxy.url}/h/pay`, { headers: { 'x-tenant': 'acme', 'idempotency-key': key }, body: 'b' });
    const r = await send(`${proxy.url}/h/pay`, { headers: { 'idempotency-key': key }, body: 'b' });
    assert.equal(r.headers['idempotent-replayed'], undefined);
    assert.equal(upstream.executions(), n + 2);
    const [row] = await sql<{ tenant_id: string }>(db.url, "SELECT tenant_id FROM idempotency_keys WHERE idem_key = $1 AND tenant_id = ''", [key]);
    assert.ok(row);
  });

  test('a very long tenant header works and never breaks the requests batched with it', async () => {
    // Incompressible and far beyond what one btree entry holds (~2.7 kB).
    const long = `t${randomBytes(3000).toString('hex')}`;
    const key = uniqueKey('long-tenant');
    const n = upstream.executions();
    const replies = await Promise.all([
      send(`${proxy.url}/h/pay`, { headers: { 'x-tenant': long, 'idempotency-key': key }, body: 'b' }),
      ...[1, 2, 3, 4].map((i) => send(`${proxy.url}/h/pay`, { headers: { 'x-tenant': `n${i}`, 'idempotency-key': key }, body: 'b' })),
    ]);
    for (const r of replies) assert.equal(r.status, 201, r.text());
    assert.equal(upstream.executions(), n + 5);
    const again = await send(`${proxy.url}/h/pay`, { headers: { 'x-tenant': long, 'idempotency-key': key }, body: 'b' });
    assert.equal(header(again, 'idempotent-replayed'), 'true');
    assert.ok(again.body.equals(replies[0]!.body));
    // A different long tenant is a different tenant.
    const other = await send(`${proxy.url}/h/pay`, { headers: { 'x-tenant': `${long}y`, 'idempotency-key': key }, body: 'b' });
    assert.equal(other.headers['idempotent-replayed'], undefined);
  });

  test('default fromHeaderHash authorization: two credentials, two executions, raw value never stored or logged', async () => {
    await twoTenants('/pay', { authorization: SECRET_A }, { authorization: SECRET_B });
    const rows = await sql<Record<string, unknown>>(db.url, "SELECT * FROM idempotency_keys WHERE route = 'by-credential'");
    assert.equal(rows.length, 2);
    assert.deepEqual(rows.map((r) => r.tenant_id).sort(), [hashTenant(SECRET_A), hashTenant(SECRET_B)].sort());
    // No column of any row (text, jsonb or bytea) holds the raw credential or a part of it.
    const dump = await sql<{ t: string }>(db.url, 'SELECT string_agg(k::text, \'\\n\') AS t FROM idempotency_keys k');
    const everything = dump[0]!.t + rows.map((r) => Buffer.isBuffer(r.response_body) ? r.response_body.toString('latin1') : '').join('\n');
    for (const needle of ['SECRET_alpha', 'SECRET_bravo', 'sk_live']) assert.ok(!everything.includes(needle), `${needle} stored`);
    // Log lines: one per request, none with the credential; keys only as a short hash.
    await waitFor('request log lines', () => log.lines.filter((l) => l.includes('"msg":"request"')).length >= 4 ? true : undefined);
    const text = log.lines.join('\n');
    for (const needle of ['SECRET_alpha', 'SECRET_bravo', 'sk_live']) assert.ok(!text.includes(needle), `${needle} logged`);
    const keyed = log.lines.map((l) => JSON.parse(l)).filter((j) => j.msg === 'request' && j.key !== undefined);
    assert.ok(keyed.length >= 4);
    for (const j of keyed) assert.match(j.key, /^[0-9a-f]{12}$/);
    for (const k of keys) assert.ok(!text.includes(k), 'raw keys are not logged');
  });
});
