// profile: stripe against the real `stripe` Node SDK (a dev dependency): the
// SDK is pointed at the proxy (host, port, protocol: http), the proxy at an
// upstream that answers like Stripe's charges endpoint. What the SDK does
// with the proxy's answers is the SDK's own logic (Stripe-Should-Retry,
// Retry-After, maxNetworkRetries; its error classes by `error.type`).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Stripe from 'stripe';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type Responder, type TestUpstream } from '../helpers/upstream.js';
import { startThrowawayPostgres, type ThrowawayPostgres } from '../helpers/servers.js';
import { metric, metricsText } from '../helpers/metrics.js';
import { sleep } from '../helpers/wait.js';

const YAML = `
defaults:
  profile: stripe
routes:
  - name: charges
    match: { path: /v1/charges }
`;

/** Like POST /v1/charges: form-encoded parameters in, a charge object out (after `delayMs`). */
const charges = (delayMs: number): Responder => async (req, n, res) => {
  await sleep(delayMs);
  const p = new URLSearchParams(req.body.toString());
  const charge = { id: `ch_${n}`, object: 'charge', amount: Number(p.get('amount')), currency: p.get('currency'), livemode: false };
  res.writeHead(200, { 'content-type': 'application/json', 'request-id': `req_${n}` });
  res.end(JSON.stringify(charge));
};

function sdk(proxy: RunningProxy, maxNetworkRetries: number): Stripe {
  const u = new URL(proxy.url);
  return new Stripe('sk_test_profiles', { host: u.hostname, port: Number(u.port), protocol: 'http', maxNetworkRetries, telemetry: false });
}

describe('profile: stripe with the stripe SDK', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(charges(400));
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML });
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('two concurrent charges.create with one idempotencyKey: one execution, both get the same charge (the SDK retries the 409 itself)', async () => {
    const stripe = sdk(proxy, 3);
    const before = upstream.executions();
    const opts = { idempotencyKey: 'order-1001' };
    const [a, b] = await Promise.all([
      stripe.charges.create({ amount: 500, currency: 'usd', source: 'tok_visa' }, opts),
      stripe.charges.create({ amount: 500, currency: 'usd', source: 'tok_visa' }, opts),
    ]);
    assert.equal(upstream.executions() - before, 1);
    assert.equal(a.id, b.id);
    assert.equal(a.amount, 500);
    const m = await metricsText(proxy.adminUrl);
    assert.ok(metric(m, 'idempotency_proxy_requests_total', { route: 'charges', outcome: 'conflict' }) >= 1, 'one of them met the 409 first');
    assert.ok(metric(m, 'idempotency_proxy_requests_total', { route: 'charges', outcome: 'replayed' }) >= 1, 'and was answered the replay');
  });

  test('the same key with other parameters throws StripeIdempotencyError, not retried', async () => {
    const stripe = sdk(proxy, 3);
    await stripe.charges.create({ amount: 700, currency: 'usd' }, { idempotencyKey: 'order-1002' });
    const n = upstream.executions();
    await assert.rejects(
      stripe.charges.create({ amount: 701, currency: 'usd' }, { idempotencyKey: 'order-1002' }),
      (err: unknown) => {
        assert.ok(err instanceof Stripe.errors.StripeIdempotencyError, `got ${(err as Error).constructor.name}: ${(err as Error).message}`);
        assert.equal(err.statusCode, 400);
        assert.equal(err.headers['stripe-should-retry'], 'false');
        return true;
      },
    );
    assert.equal(upstream.executions(), n);
  });
});

describe('profile: stripe — a 503 while the key store is down is retried by the SDK', () => {
  let pg: ThrowawayPostgres;
  let upstream: TestUpstream;
  let proxy: RunningProxy;

  before(async () => {
    pg = await startThrowawayPostgres();
    upstream = await startUpstream(charges(0));
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: pg.url, yaml: `store: { poolSize: 2 }\n${YAML}` });
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await pg?.destroy();
  });

  test('store stopped: the SDK gets 503 + Stripe-Should-Retry: true, retries, and succeeds once the store is back', async () => {
    const stripe = sdk(proxy, 6);
    await pg.stop('immediate');
    const created = stripe.charges.create({ amount: 900, currency: 'eur' }, { idempotencyKey: 'order-2001' });
    await sleep(600);
    await pg.start();
    const charge = await created;
    assert.equal(charge.amount, 900);
    assert.equal(upstream.executions(), 1);
    const m = await metricsText(proxy.adminUrl);
    assert.ok(metric(m, 'idempotency_proxy_requests_total', { route: 'charges', outcome: 'store_error' }) >= 1, 'the proxy answered 503 at least once');
  });
});
