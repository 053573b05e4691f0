// Every example in config/ is a valid configuration and says what its
// comments promise.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../../src/config/load.js';
import type { Config, RoutePolicy } from '../../src/config/types.js';
import { Router } from '../../src/policy/router.js';

function configDir(): string {
  const candidates = [
    path.resolve(process.cwd(), 'config'),
    fileURLToPath(new URL('../../../config', import.meta.url)),
  ];
  const found = candidates.find((d) => existsSync(path.join(d, 'payments.yaml')));
  assert.ok(found, `config/ not found in ${candidates.join(', ')}`);
  return found;
}

const ENV = { DATABASE_URL: 'postgres://proxy@db.internal:5432/idempotency', UPSTREAM_URL: 'http://api.internal:3000' };

function load(name: string, env: Record<string, string> = ENV): Config {
  return loadConfig({ file: path.join(configDir(), name), env });
}

function route(config: Config, method: string, p: string): RoutePolicy | null {
  return new Router(config).match(method, p)?.policy ?? null;
}

const EXPECTED = ['cloudevents.yaml', 'passthrough-default.yaml', 'payments.yaml', 'psp-webhooks.yaml', 'shadow-rollout.yaml', 'strict-no-reexecute.yaml'];

test('every config/*.yaml loads without errors, with and without the environment, and compiles its routes', () => {
  const files = readdirSync(configDir()).filter((f) => /\.ya?ml$/.test(f)).sort();
  for (const f of EXPECTED) assert.ok(files.includes(f), `config/${f} is missing`);
  for (const f of files) {
    for (const env of [ENV, {}]) {
      let config: Config;
      try {
        config = load(f, env);
      } catch (err) {
        assert.fail(`config/${f} (env ${JSON.stringify(env)}): ${(err as Error).message}`);
      }
      assert.ok(config.routes.length > 0, f);
      assert.doesNotThrow(() => new Router(config), f);
    }
    const text = readFileSync(path.join(configDir(), f), 'utf8');
    const comments = text.split('\n').filter((l) => l.trim().startsWith('#')).length;
    assert.ok(comments >= 10, `config/${f} has only ${comments} comment lines: explain the choices`);
  }
});

test('payments.yaml: required keys on money routes, mismatch 400, tenant from the Authorization hash', () => {
  const c = load('payments.yaml');
  assert.equal(c.store.postgres, ENV.DATABASE_URL);
  assert.equal(c.upstream.url, 'http://api.internal:3000');
  for (const p of ['/v1/payment_intents', '/v1/payment_intents/pi_1/confirm', '/v1/charges', '/v1/refunds', '/v1/transfers', '/v1/payouts/po_1/cancel']) {
    const r = route(c, 'POST', p);
    assert.ok(r, p);
    assert.equal(r.required, true, p);
    assert.equal(r.mismatchStatus, 400, p);
    assert.deepEqual(r.tenant, { kind: 'fromHeaderHash', header: 'authorization' }, p);
    assert.equal(r.onStoreError, 'fail');
  }
  assert.equal(route(c, 'POST', '/v1/customers')!.required, false);
  assert.equal(route(c, 'GET', '/v1/charges/ch_1')!.mode, 'passthrough');
});

test('psp-webhooks.yaml: keyed by the event id /id, canonical fingerprint without volatile fields', () => {
  const c = load('psp-webhooks.yaml');
  const r = route(c, 'POST', '/webhooks/psp')!;
  assert.deepEqual(r.key, { kind: 'fromBody', pointer: '/id' });
  assert.equal(r.fingerprint.json, 'canonical');
  assert.ok(r.fingerprint.exclude.length >= 2);
  assert.equal(r.onInFlight, 'wait');
  assert.equal(route(c, 'POST', '/webhooks/psp/thin')!.key.kind, 'fromBody');
});

test('cloudevents.yaml: ce-id within ce-source; webhook-id', () => {
  const c = load('cloudevents.yaml');
  const ce = route(c, 'POST', '/events/orders')!;
  assert.deepEqual(ce.key, { kind: 'fromHeader', header: 'ce-id' });
  assert.deepEqual(ce.tenant, { kind: 'fromHeader', header: 'ce-source' });
  assert.deepEqual(route(c, 'POST', '/webhooks/svix')!.key, { kind: 'fromHeader', header: 'webhook-id' });
});

test('shadow-rollout.yaml: routes under observation are in shadow mode', () => {
  const c = load('shadow-rollout.yaml');
  assert.equal(route(c, 'POST', '/v1/orders')!.mode, 'shadow');
  assert.equal(route(c, 'PATCH', '/v1/carts/c1')!.mode, 'shadow');
  assert.equal(route(c, 'POST', '/v1/checkout')!.mode, 'enforce');
});

test('strict-no-reexecute.yaml: onExpiredLease fail, never release an unknown outcome', () => {
  const c = load('strict-no-reexecute.yaml');
  for (const p of ['/v1/payouts', '/v1/ledger/entries']) {
    const r = route(c, 'POST', p)!;
    assert.equal(r.onExpiredLease, 'fail', p);
    assert.equal(r.onUnknownOutcome, 'store', p);
    assert.ok(r.leaseMs >= c.upstream.timeoutMs, 'lease outlives the upstream timeout');
  }
  assert.equal(route(c, 'POST', '/v1/customers')!.onExpiredLease, 'reexecute');
});

test('passthrough-default.yaml: only the listed routes deduplicate', () => {
  const c = load('passthrough-default.yaml');
  assert.equal(route(c, 'POST', '/api/orders')!.mode, 'enforce');
  assert.equal(route(c, 'POST', '/api/search')!.onStoreError, 'passthrough');
  assert.equal(route(c, 'POST', '/api/anything')!.mode, 'passthrough');
  assert.equal(route(c, 'POST', '/')!.mode, 'passthrough');
});
