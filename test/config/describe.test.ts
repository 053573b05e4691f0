import { test } from 'node:test';
import assert from 'node:assert/strict';
import { describeConfig } from '../../src/config/describe.js';
import { loadConfig } from '../../src/config/load.js';
import { maskUrl } from '../../src/config/mask.js';
import { CONTRACT_EXAMPLE } from './fixtures.js';

test('describes every route with human-readable durations and sizes', () => {
  const text = describeConfig(loadConfig({ text: CONTRACT_EXAMPLE, env: {} }));
  assert.match(text, /^ {2}listen +0\.0\.0\.0:8080$/m);
  assert.match(text, /^ {2}store +embedded PGlite in \.idempotency-proxy\/data \(single instance only\)$/m);
  assert.match(text, /^route 1\/3 "payments"$/m);
  assert.match(text, /^ {2}match +POST \/v1\/payments\/\*\*$/m);
  assert.match(text, /^ {2}key +header idempotency-key, required/m);
  assert.match(text, /^ {2}key +body field \/id \(JSON Pointer\)/m);
  assert.match(text, /^ {2}ttl +24h$/m);
  assert.match(text, /^ {2}lease +1m30s$/m);
  assert.match(text, /^ {2}request body +up to 1MiB/m);
  assert.match(text, /^route 3\/3 "everything-else"\n {2}match +any method \/\*\*\n {2}mode +passthrough/m);
});

test('never prints passwords or the admin token', () => {
  const config = loadConfig({
    text: `${CONTRACT_EXAMPLE}\nadminToken: \${TOKEN}\n`,
    env: {
      TOKEN: 'admin-t0ken-value',
      DATABASE_URL: 'postgresql://app:pg-pa55word@db.internal:5432/app?sslmode=require&sslpassword=key-pa55',
      REDIS_URL: 'rediss://:redis-pa55word@cache.internal:6380/0',
    },
  });
  const text = describeConfig(config);
  for (const secret of ['admin-t0ken-value', 'pg-pa55word', 'key-pa55', 'redis-pa55word']) {
    assert.ok(!text.includes(secret), `${secret} leaked`);
  }
  assert.match(text, /PostgreSQL postgresql:\/\/app:\*\*\*\*@db\.internal:5432\/app\?sslmode=require&sslpassword=\*\*\*\* \(pool 10, idle connections closed after 5m, timeout 5s\)/);
  assert.match(text, /Redis rediss:\/\/:\*\*\*\*@cache\.internal:6380\/0/);
  assert.match(text, /admin token: set, not shown/);
});

test('the store line says how long an idle PostgreSQL connection is kept', () => {
  const line = (store: string): string => describeConfig(loadConfig({ text: `upstream: { url: http://127.0.0.1:3000 }\nstore: ${store}\n`, env: {} }))
    .split('\n').find((l) => l.includes('PostgreSQL'))!;
  assert.match(line('{ postgres: "postgres://db/app", poolSize: 4, idleTimeout: 30s }'), /\(pool 4, idle connections closed after 30s, timeout 5s\)/);
  assert.match(line('{ postgres: "postgres://db/app", idleTimeout: 24d }'), /\(pool 10, idle connections closed after 24d, timeout 5s\)/);
});

test('maskUrl leaves URLs without secrets readable and hides unparsable ones', () => {
  assert.equal(maskUrl('postgres://postgres@127.0.0.1:5432/postgres'), 'postgres://postgres@127.0.0.1:5432/postgres');
  assert.equal(maskUrl('host=db password=secret'), '(set, not shown)');
});
