// mode: shadow — every request reaches the upstream; keys are recorded and
// what enforcement would have done is logged (shadow: replayed | conflict |
// mismatch) and counted (idempotency_proxy_shadow_decisions_total).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send, together } from '../helpers/http.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { metric, metricsText } from '../helpers/metrics.js';
import { type LogLine, startLoggedProxy } from '../helpers/proxy.js';

const YAML = `
routes:
  - name: orders-shadow
    match: { path: /orders/** }
    tenant: { constant: shop }
    mode: shadow
    required: true
`;

describe('mode: shadow', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let lines: LogLine[];
  const post = (path: string, key: string | null, body: string) => send(`${proxy.url}${path}`, {
    headers: { 'content-type': 'application/json', ...(key === null ? {} : { 'idempotency-key': key }) },
    body,
  });
  const requestLines = (): LogLine[] => lines.filter((l) => l.msg === 'request' && l.route === 'orders-shadow');

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream((req, n, res) => jsonResponder(201, req.url === '/orders/slow' ? 400 : 0)(req, n, res));
    ({ proxy, lines } = await startLoggedProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML }));
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('duplicates, mismatches and concurrent duplicates all reach the upstream; logs and metrics say what enforcement would have done', async () => {
    const first = await post('/orders', 'o-1', '{"qty":1}');
    const dup = await post('/orders', 'o-1', '{"qty":1}');
    const mismatch = await post('/orders', 'o-1', '{"qty":2}');
    const race = await together(2, () => post('/orders/slow', 'o-2', '{"qty":1}'));

    assert.equal(upstream.executions(), 5, 'every request was forwarded');
    for (const r of [first, dup, mismatch, ...race]) {
      assert.equal(r.status, 201);
      assert.equal(r.headers['idempotent-replayed'], undefined, 'shadow never replays');
    }
    assert.notEqual(dup.json().execution, first.json().execution, 'the duplicate got a fresh upstream answer');
    assert.equal(mismatch.json().body, '{"qty":2}');

    // The key was recorded by the first request as enforcement would have.
    const rows = await sql<{ state: string; status_code: number }>(db.url, "SELECT state, status_code FROM idempotency_keys WHERE tenant_id = 'shop' AND idem_key = 'o-1'");
    assert.deepEqual(rows, [{ state: 'complete', status_code: 201 }]);

    const decisions = requestLines().map((l) => l.shadow ?? null);
    assert.deepEqual(decisions.slice(0, 3), [null, 'replayed', 'mismatch']);
    assert.deepEqual(decisions.slice(3).sort(), ['conflict', null].sort());
    for (const l of requestLines().filter((x) => x.shadow !== undefined)) {
      assert.equal(l.outcome, 'passthrough', 'what actually happened: forwarded');
      assert.equal(l.status, 201);
    }

    const text = await metricsText(proxy.adminUrl);
    const m = (decision: string): number => metric(text, 'idempotency_proxy_shadow_decisions_total', { route: 'orders-shadow', decision });
    assert.equal(m('replayed'), 1);
    assert.equal(m('mismatch'), 1);
    assert.equal(m('conflict'), 1);
  });

  test('a key that would be rejected (missing on a required route) is forwarded and logged as rejected', async () => {
    const before = upstream.executions();
    const r = await post('/orders', null, '{"qty":9}');
    assert.equal(r.status, 201);
    assert.equal(upstream.executions(), before + 1);
    const last = requestLines().at(-1)!;
    assert.equal(last.shadow, 'rejected');
    assert.equal(metric(await metricsText(proxy.adminUrl), 'idempotency_proxy_shadow_decisions_total', { route: 'orders-shadow', decision: 'rejected' }), 1);
  });
});
