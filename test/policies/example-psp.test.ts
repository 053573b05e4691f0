// config/psp-webhooks.yaml as shipped, end to end: a provider's redelivery —
// re-serialized, restamped, re-signed — executes once; a handler's 5xx is
// released so the next delivery is handled.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';

function example(): string {
  const file = [path.resolve(process.cwd(), 'config/psp-webhooks.yaml'), new URL('../../../config/psp-webhooks.yaml', import.meta.url).pathname]
    .find((f) => existsSync(f));
  assert.ok(file, 'config/psp-webhooks.yaml not found');
  return readFileSync(file, 'utf8');
}

describe('config/psp-webhooks.yaml', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let failNext = false;

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream((req, n, res) => {
      if (failNext) {
        failNext = false;
        return jsonResponder(500)(req, n, res);
      }
      return jsonResponder(200)(req, n, res);
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: example() });
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  const deliver = (body: string, signature: string) => send(`${proxy.url}/webhooks/psp`, {
    headers: { 'content-type': 'application/json', 'stripe-signature': signature },
    body,
  });

  test('a restamped, re-serialized redelivery is replayed', async () => {
    const first = await deliver('{"id":"evt_9","type":"charge.succeeded","created_at":1700000000,"data":{"amount":500}}', 't=1,v1=a');
    const again = await deliver('{ "data": { "amount": 500 }, "type": "charge.succeeded", "id": "evt_9", "created_at": 1700000360, "delivery_attempt": 2 }', 't=2,v1=b');
    assert.equal(first.status, 200);
    assert.equal(again.status, 200);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.equal(upstream.executions(), 1);
    const changed = await deliver('{"id":"evt_9","type":"charge.succeeded","created_at":1700000000,"data":{"amount":501}}', 't=3,v1=c');
    assert.equal(changed.status, 422, 'the same event id with another amount is flagged');
    assert.equal(upstream.executions(), 1);
  });

  test('a 5xx from the handler is released: the next delivery is handled', async () => {
    failNext = true;
    const body = '{"id":"evt_10","type":"payout.paid"}';
    assert.equal((await deliver(body, 'a')).status, 500);
    const retry = await deliver(body, 'b');
    assert.equal(retry.status, 200);
    assert.equal(retry.headers['idempotent-replayed'], undefined);
    const third = await deliver(body, 'c');
    assert.equal(third.headers['idempotent-replayed'], 'true');
    assert.equal(upstream.received.filter((r) => r.body.toString() === body).length, 2);
  });
});
