// The example file of docs/contract.md (Configuration), verbatim, resolves to the documented policy.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/config/load.js';
import type { RoutePolicy } from '../../src/config/types.js';
import { CONTRACT_EXAMPLE } from './fixtures.js';


const inherited: Omit<RoutePolicy, 'name' | 'match' | 'key' | 'required' | 'mode'> = {
  methods: ['POST', 'PATCH'],
  ttlMs: 86_400_000,
  leaseMs: 90_000,
  maxBodyBytes: 1_048_576,
  maxStoredResponseBytes: 1_048_576,
  tenant: { kind: 'fromHeaderHash', header: 'authorization' },
  fingerprint: { headers: ['content-type'], query: true, json: 'raw', exclude: [] },
  releaseOn: [401, 403, 429],
  mismatchStatus: 422,
  onInFlight: 'conflict',
  waitMs: 5_000,
  onUnknownOutcome: 'store',
  onExpiredLease: 'reexecute',
  outcomeProbe: null,
  onStoreError: 'fail',
  storeHeaders: [],
  dropHeaders: [],
  profile: 'ietf',
  errorFormat: 'problem',
  keyScope: 'tenant',
  echoKey: false,
  record: 'full',
  fromProfile: [],
};

test('contract example with DATABASE_URL and REDIS_URL unset', () => {
  const config = loadConfig({ text: CONTRACT_EXAMPLE, env: {} });
  assert.deepEqual(config.listen, { host: '0.0.0.0', port: 8080 });
  assert.deepEqual(config.admin, { host: '127.0.0.1', port: 9090 });
  assert.equal(config.adminToken, null);
  assert.deepEqual(config.upstream, { url: 'http://127.0.0.1:3000', timeoutMs: 30_000, connections: 128, keepAliveTimeoutMs: null, tls: null });
  assert.deepEqual(config.store, {
    postgres: null,
    redis: null,
    dataDir: '.idempotency-proxy/data',
    poolSize: 10,
    idleTimeoutMs: 300_000,
    migrate: true,
    sweepIntervalMs: 60_000,
    sweepBatchSize: 1_000,
    timeoutMs: 5_000,
    preparedStatements: true,
    shardRouting: true,
  });
  assert.equal(config.logLevel, 'info');
  assert.deepEqual(
    config.routes.map((r) => r.name),
    ['payments', 'psp-webhooks', 'everything-else'],
  );
  const [payments, webhooks, rest] = config.routes as [RoutePolicy, RoutePolicy, RoutePolicy];
  assert.deepEqual(payments, {
    name: 'payments',
    match: { methods: ['POST'], path: '/v1/payments/**' },
    key: { kind: 'header', header: 'idempotency-key' },
    required: true,
    mode: 'enforce',
    ...inherited,
  });
  assert.deepEqual(webhooks, {
    name: 'psp-webhooks',
    match: { methods: ['POST'], path: '/webhooks/psp' },
    key: { kind: 'fromBody', pointer: '/id' },
    required: false,
    mode: 'enforce',
    ...inherited,
  });
  assert.deepEqual(rest.match, { methods: null, path: '/**' });
  assert.equal(rest.mode, 'passthrough');
  assert.deepEqual(rest.key, { kind: 'header', header: 'idempotency-key' });
});

test('contract example with DATABASE_URL and REDIS_URL set', () => {
  const config = loadConfig({
    text: CONTRACT_EXAMPLE,
    env: { DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/postgres', REDIS_URL: 'redis://127.0.0.1:6379' },
  });
  assert.equal(config.store.postgres, 'postgres://postgres@127.0.0.1:5432/postgres');
  assert.equal(config.store.redis, 'redis://127.0.0.1:6379');
});

test('the file with every default removed resolves to the same routes', () => {
  const bare = `
upstream: { url: http://127.0.0.1:3000 }
routes:
  - name: payments
    match: { methods: [POST], path: /v1/payments/** }
    required: true
  - name: psp-webhooks
    match: { methods: [POST], path: /webhooks/psp }
    key: { fromBody: /id }
  - name: everything-else
    match: { path: /** }
    mode: passthrough
`;
  assert.deepEqual(loadConfig({ text: bare, env: {} }), loadConfig({ text: CONTRACT_EXAMPLE, env: {} }));
});
