// Webhook and message deduplication: the key comes from the event id in the
// JSON body (a payment provider's webhook) or from a header (CloudEvents
// ce-id, Standard Webhooks webhook-id). Redeliveries carry fresh signature
// and timestamp headers; they are one operation and execute once.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send, together } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { problemType } from './support.js';
import { sleep } from '../helpers/wait.js';

const YAML = `
routes:
  - name: psp
    match: { methods: [POST], path: "/webhooks/{psp,slow}" }
    key: { fromBody: /id }
    tenant: { constant: psp }
  - name: nested
    match: { methods: [POST], path: /webhooks/nested }
    key: { fromBody: /data/event/id }
    tenant: { constant: psp }
  - name: cloudevents
    match: { methods: [POST], path: /events/** }
    key: { fromHeader: ce-id }
    tenant: { fromHeader: ce-source }
    required: true
  - name: standard-webhooks
    match: { methods: [POST], path: /webhooks/std }
    key: { fromHeader: webhook-id }
    tenant: { constant: std }
`;

const JSON_CT = { 'content-type': 'application/json' };

describe('webhook keys (fromBody, fromHeader)', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const hits = (path: string): number => upstream.received.filter((r) => r.url === path).length;

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(async (req, n, res) => {
      if (req.url === '/webhooks/slow') await sleep(300);
      return jsonResponder(200)(req, n, res);
    });
    proxy = await startTestProxy({
      upstream: upstream.url,
      databaseUrl: db.url,
      yaml: YAML,
    });
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('the same event delivered twice with different signature headers executes once', async () => {
    const event = JSON.stringify({ id: 'evt_1MqqbKLt4dXK03v5', type: 'payment_intent.succeeded', data: { object: { amount: 2000 } } });
    const first = await send(`${proxy.url}/webhooks/psp`, {
      headers: { ...JSON_CT, 'stripe-signature': 't=1700000000,v1=aaaa', 'webhook-signature': 'v1,first' },
      body: event,
    });
    const again = await send(`${proxy.url}/webhooks/psp`, {
      headers: { ...JSON_CT, 'stripe-signature': 't=1700000360,v1=bbbb', 'webhook-signature': 'v1,second' },
      body: event,
    });
    assert.equal(first.status, 200);
    assert.equal(first.headers['idempotent-replayed'], undefined);
    assert.equal(again.status, 200);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.deepEqual(again.body, first.body, 'the redelivery gets the stored response');
    assert.equal(hits('/webhooks/psp'), 1);
  });

  test('concurrent redeliveries of one event: exactly one execution', async () => {
    const event = JSON.stringify({ id: 'evt_concurrent', type: 'charge.refunded' });
    const replies = await together(6, (i) => send(`${proxy.url}/webhooks/slow`, {
      headers: { ...JSON_CT, 'stripe-signature': `t=17000000${i},v1=${i}` },
      body: event,
    }));
    assert.equal(hits('/webhooks/slow'), 1);
    const executed = replies.filter((r) => r.status === 200 && r.headers['idempotent-replayed'] === undefined);
    assert.equal(executed.length, 1);
    for (const r of replies) assert.ok(r.status === 200 || r.status === 409, `unexpected ${r.status}`);
  });

  test('a body without the pointer target is 400 key-pointer-missing and never reaches the upstream', async () => {
    const before = upstream.executions();
    const flat = await send(`${proxy.url}/webhooks/psp`, { headers: JSON_CT, body: JSON.stringify({ type: 'x', data: {} }) });
    assert.equal(flat.status, 400);
    assert.equal(problemType(flat), 'key-pointer-missing');
    assert.match(flat.json().detail, /\/id/);
    const nested = await send(`${proxy.url}/webhooks/nested`, { headers: JSON_CT, body: JSON.stringify({ data: { event: {} } }) });
    assert.equal(nested.status, 400);
    assert.equal(problemType(nested), 'key-pointer-missing');
    assert.match(nested.json().detail, /\/data\/event\/id/);
    const nullId = await send(`${proxy.url}/webhooks/psp`, { headers: JSON_CT, body: JSON.stringify({ id: null }) });
    assert.equal(nullId.status, 400);
    assert.equal(problemType(nullId), 'key-pointer-missing');
    assert.equal(upstream.executions(), before);
  });

  test('a body that is not JSON is 400 key-body-not-json and never reaches the upstream', async () => {
    const before = upstream.executions();
    for (const body of ['id=evt_1&type=x', '{"id": "evt_1"', '']) {
      const r = await send(`${proxy.url}/webhooks/psp`, { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body });
      assert.equal(r.status, 400, `body ${JSON.stringify(body)}`);
      assert.equal(problemType(r), 'key-body-not-json');
    }
    assert.equal(upstream.executions(), before);
  });

  test('an id that is an object or a boolean is 400 key-malformed', async () => {
    const before = upstream.executions();
    for (const id of [{ nested: 1 }, true, 1.5, '']) {
      const r = await send(`${proxy.url}/webhooks/psp`, { headers: JSON_CT, body: JSON.stringify({ id }) });
      assert.equal(r.status, 400, `id ${JSON.stringify(id)}`);
      assert.equal(problemType(r), 'key-malformed');
    }
    assert.equal(upstream.executions(), before);
  });

  test('number ids work and nested pointers work', async () => {
    const before = hits('/webhooks/psp');
    const body = JSON.stringify({ id: 987654321, type: 'order.paid' });
    const a = await send(`${proxy.url}/webhooks/psp`, { headers: { ...JSON_CT, 'x-signature': 'a' }, body });
    const b = await send(`${proxy.url}/webhooks/psp`, { headers: { ...JSON_CT, 'x-signature': 'b' }, body });
    assert.equal(a.status, 200);
    assert.equal(b.headers['idempotent-replayed'], 'true');
    assert.equal(hits('/webhooks/psp'), before + 1);
    const rows = await sql(db.url, "SELECT idem_key FROM idempotency_keys WHERE tenant_id = 'psp' AND idem_key = '987654321'");
    assert.equal(rows.length, 1, 'the number is stored as its decimal string');

    const n1 = JSON.stringify({ data: { event: { id: 'evt_nested' } }, sent: 1 });
    const x = await send(`${proxy.url}/webhooks/nested`, { headers: JSON_CT, body: n1 });
    const y = await send(`${proxy.url}/webhooks/nested`, { headers: JSON_CT, body: n1 });
    assert.equal(x.status, 200);
    assert.equal(y.headers['idempotent-replayed'], 'true');
    assert.equal(hits('/webhooks/nested'), 1);
  });

  test('CloudEvents: ce-id is the key, ce-source the tenant; fresh ce-time does not matter', async () => {
    const body = JSON.stringify({ orderId: 'o-17', total: 4200 });
    const headers = (time: string, source = '/shop/orders'): Record<string, string> => ({
      ...JSON_CT, 'ce-specversion': '1.0', 'ce-type': 'com.example.order.paid', 'ce-source': source, 'ce-id': 'A234-1234-1234', 'ce-time': time,
    });
    const a = await send(`${proxy.url}/events/orders`, { headers: headers('2024-05-01T10:00:00Z'), body });
    const b = await send(`${proxy.url}/events/orders`, { headers: headers('2024-05-01T10:00:30Z'), body });
    assert.equal(a.status, 200);
    assert.equal(b.status, 200);
    assert.equal(b.headers['idempotent-replayed'], 'true');
    assert.equal(hits('/events/orders'), 1);
    // The same ce-id from another source is another event (ids are unique per source).
    const other = await send(`${proxy.url}/events/orders`, { headers: headers('2024-05-01T10:00:00Z', '/billing'), body });
    assert.equal(other.headers['idempotent-replayed'], undefined);
    assert.equal(hits('/events/orders'), 2);
    // required: true → no ce-id is a 400 and nothing is forwarded.
    const missing = await send(`${proxy.url}/events/orders`, { headers: JSON_CT, body });
    assert.equal(missing.status, 400);
    assert.equal(problemType(missing), 'key-missing');
    assert.match(missing.json().detail, /ce-id/);
    assert.equal(hits('/events/orders'), 2);
  });

  test('Standard Webhooks: webhook-id is the key; new webhook-timestamp/-signature are the same delivery', async () => {
    const body = JSON.stringify({ type: 'invoice.paid', data: { invoice: 'in_1' } });
    const h = (ts: string, sig: string): Record<string, string> => ({
      ...JSON_CT, 'webhook-id': 'msg_2KWPBgLlAfxdpx2AI54pPJ85f4W', 'webhook-timestamp': ts, 'webhook-signature': sig,
    });
    const replies = [
      await send(`${proxy.url}/webhooks/std`, { headers: h('1700000000', 'v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4='), body }),
      await send(`${proxy.url}/webhooks/std`, { headers: h('1700000005', 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE='), body }),
      await send(`${proxy.url}/webhooks/std`, { headers: h('1700000900', 'v1,zzzz'), body }),
    ];
    assert.deepEqual(replies.map((r) => r.status), [200, 200, 200]);
    assert.deepEqual(replies.map((r) => r.headers['idempotent-replayed']), [undefined, 'true', 'true']);
    assert.equal(hits('/webhooks/std'), 1);
  });
});
