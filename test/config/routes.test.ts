// Route resolution: inheritance from defaults, key sources, the implicit route, freezing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/config/load.js';
import type { RoutePolicy } from '../../src/config/types.js';

const UPSTREAM = 'upstream: { url: http://127.0.0.1:3000 }\n';
const load = (text: string) => loadConfig({ text: UPSTREAM + text, env: {} });

test('no routes (absent, null or empty) → one implicit route "default" on /** with the defaults', () => {
  for (const text of ['', 'routes:\n', 'routes: []\n']) {
    const config = load(`defaults: { ttl: 1h, mode: shadow }\n${text}`);
    assert.equal(config.routes.length, 1, text);
    const route = config.routes[0] as RoutePolicy;
    assert.equal(route.name, 'default');
    assert.deepEqual(route.match, { methods: null, path: '/**' });
    assert.equal(route.ttlMs, 3_600_000);
    assert.equal(route.mode, 'shadow');
    assert.deepEqual(route.methods, ['POST', 'PATCH']);
  }
});

test('a route overrides defaults field by field; fingerprint merges sub-field by sub-field', () => {
  const config = load(`
defaults:
  ttl: 48h
  fingerprint: { headers: [Content-Type, X-Api-Version], query: false }
  storeHeaders: [Set-Cookie]
routes:
  - name: orders
    match: { methods: [post, PUT], path: /v1/orders/* }
    methods: [put, post, POST]
    ttl: 1h
    maxBodyBytes: 64KiB
    fingerprint: { json: canonical, exclude: [/meta/requestedAt, /a~1b] }
    dropHeaders: [X-Request-Id]
  - name: other
    match: { path: /other }
`);
  const [orders, other] = config.routes as [RoutePolicy, RoutePolicy];
  assert.deepEqual(orders.match, { methods: ['POST', 'PUT'], path: '/v1/orders/*' });
  assert.deepEqual(orders.methods, ['PUT', 'POST']);
  assert.equal(orders.ttlMs, 3_600_000);
  assert.equal(orders.maxBodyBytes, 65_536);
  assert.deepEqual(orders.fingerprint, {
    headers: ['content-type', 'x-api-version'],
    query: false,
    json: 'canonical',
    exclude: ['/meta/requestedAt', '/a~1b'],
  });
  assert.deepEqual(orders.storeHeaders, ['set-cookie']);
  assert.deepEqual(orders.dropHeaders, ['x-request-id']);
  assert.equal(other.ttlMs, 172_800_000);
  assert.deepEqual(other.fingerprint, { headers: ['content-type', 'x-api-version'], query: false, json: 'raw', exclude: [] });
});

test('key sources: keyHeader, key.fromHeader, key.fromBody, most specific level wins', () => {
  const config = load(`
defaults:
  keyHeader: X-Idem-Key
  tenant: { fromHeader: X-Tenant-Id }
routes:
  - { name: header, match: { path: /a } }
  - { name: cloudevents, match: { path: /b }, key: { fromHeader: Ce-Id } }
  - { name: webhook, match: { path: /c }, key: { fromBody: /data/id }, tenant: { constant: psp } }
  - { name: own, match: { path: /d }, keyHeader: Request-Key, tenant: { fromHeaderHash: X-Api-Key } }
`);
  const keys = config.routes.map((r) => r.key);
  assert.deepEqual(keys, [
    { kind: 'header', header: 'x-idem-key' },
    { kind: 'fromHeader', header: 'ce-id' },
    { kind: 'fromBody', pointer: '/data/id' },
    { kind: 'header', header: 'request-key' },
  ]);
  assert.deepEqual(config.routes.map((r) => r.tenant), [
    { kind: 'fromHeader', header: 'x-tenant-id' },
    { kind: 'fromHeader', header: 'x-tenant-id' },
    { kind: 'constant', value: 'psp' },
    { kind: 'fromHeaderHash', header: 'x-api-key' },
  ]);
  const fromDefaults = load('defaults: { key: { fromBody: /id } }\nroutes: [ { name: r, match: { path: /r }, keyHeader: X-K } ]\n');
  assert.deepEqual(fromDefaults.routes[0]?.key, { kind: 'header', header: 'x-k' }, "a route's keyHeader beats the defaults' key");
});

test('every enum and store option reaches the Config', () => {
  const config = load(`
adminToken: t0ken
logLevel: debug
store: { dataDir: /var/lib/idem, poolSize: 3, idleTimeout: 90s, migrate: false, sweepInterval: 5m, sweepBatchSize: 50 }
defaults:
  mode: shadow
  mismatchStatus: 400
  onInFlight: wait
  waitTimeout: 2500ms
  onUnknownOutcome: release
  onExpiredLease: fail
  onStoreError: passthrough
  releaseOn: []
  required: true
  maxStoredResponseBytes: 0
`);
  const route = config.routes[0] as RoutePolicy;
  assert.equal(config.adminToken, 't0ken');
  assert.equal(config.logLevel, 'debug');
  assert.deepEqual(config.store, { postgres: null, redis: null, dataDir: '/var/lib/idem', poolSize: 3, idleTimeoutMs: 90_000, migrate: false, sweepIntervalMs: 300_000, sweepBatchSize: 50, timeoutMs: 5_000, preparedStatements: true, shardRouting: true });
  assert.equal(route.mode, 'shadow');
  assert.equal(route.mismatchStatus, 400);
  assert.equal(route.onInFlight, 'wait');
  assert.equal(route.waitMs, 2_500);
  assert.equal(route.onUnknownOutcome, 'release');
  assert.equal(route.onExpiredLease, 'fail');
  assert.equal(route.onStoreError, 'passthrough');
  assert.deepEqual(route.releaseOn, []);
  assert.equal(route.required, true);
  assert.equal(route.maxStoredResponseBytes, 0);
});

test('YAML anchors and merge keys work', () => {
  const config = load(`
routes:
  - &base { name: a, match: { path: /a }, ttl: 2h, required: true }
  - { <<: *base, name: b, match: { path: /b } }
`);
  assert.deepEqual(config.routes.map((r) => [r.name, r.ttlMs, r.required, r.match.path]), [
    ['a', 7_200_000, true, '/a'],
    ['b', 7_200_000, true, '/b'],
  ]);
});

test('the Config is deeply frozen: mutation throws in strict mode', () => {
  const config = load(`routes: [ { name: a, match: { methods: [POST], path: /a } } ]\n`);
  const route = config.routes[0] as RoutePolicy;
  const mutable = config as unknown as Record<string, unknown>;
  assert.throws(() => { mutable.logLevel = 'trace'; }, TypeError);
  assert.throws(() => { (config.upstream as { url: string }).url = 'http://evil'; }, TypeError);
  assert.throws(() => { (config.routes as RoutePolicy[]).push(route); }, TypeError);
  assert.throws(() => { (route.methods as string[])[0] = 'GET'; }, TypeError);
  assert.throws(() => { (route.fingerprint.headers as string[]).push('x'); }, TypeError);
  assert.throws(() => { (route.match as { path: string }).path = '/b'; }, TypeError);
  assert.throws(() => { (route.tenant as { header: string }).header = 'x'; }, TypeError);
  assert.equal(config.logLevel, 'info');
  // A second load is unaffected by the first being frozen.
  assert.deepEqual(load('defaults: { methods: [PUT] }\n').routes[0]?.methods, ['PUT']);
});
