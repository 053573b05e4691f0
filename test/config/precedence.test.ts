// docs/contract.md (Command line): flag beats file beats environment.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../../src/config/errors.js';
import { loadConfig } from '../../src/config/load.js';

const ENV = {
  DATABASE_URL: 'postgres://env@127.0.0.1:5432/env',
  REDIS_URL: 'redis://127.0.0.1:6379/1',
};

const FILE = `
listen: 127.0.0.1:18080
admin: 127.0.0.1:19090
upstream: { url: http://127.0.0.1:3001 }
store:
  postgres: postgres://file@127.0.0.1:5432/file
  redis: redis://127.0.0.1:6379/2
logLevel: warn
`;

const dir = mkdtempSync(join(tmpdir(), 'idemp-config-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('flags beat the file', () => {
  const config = loadConfig({
    text: FILE,
    env: ENV,
    flags: {
      upstream: 'http://127.0.0.1:3002',
      listen: '127.0.0.1:0',
      admin: '[::1]:0',
      databaseUrl: 'postgres://flag@127.0.0.1:5432/flag',
      redisUrl: 'redis://127.0.0.1:6379/3',
      logLevel: 'debug',
    },
  });
  assert.equal(config.upstream.url, 'http://127.0.0.1:3002');
  assert.deepEqual(config.listen, { host: '127.0.0.1', port: 0 });
  assert.deepEqual(config.admin, { host: '::1', port: 0 });
  assert.equal(config.store.postgres, 'postgres://flag@127.0.0.1:5432/flag');
  assert.equal(config.store.redis, 'redis://127.0.0.1:6379/3');
  assert.equal(config.logLevel, 'debug');
});

test('the file beats the environment', () => {
  const config = loadConfig({ text: FILE, env: ENV });
  assert.equal(config.upstream.url, 'http://127.0.0.1:3001');
  assert.deepEqual(config.listen, { host: '127.0.0.1', port: 18080 });
  assert.equal(config.store.postgres, 'postgres://file@127.0.0.1:5432/file');
  assert.equal(config.store.redis, 'redis://127.0.0.1:6379/2');
  assert.equal(config.logLevel, 'warn');
});

test('the environment is used when the file leaves the store unset or empty', () => {
  const unset = loadConfig({ text: 'upstream: { url: http://127.0.0.1:3001 }', env: ENV });
  assert.equal(unset.store.postgres, ENV.DATABASE_URL);
  assert.equal(unset.store.redis, ENV.REDIS_URL);
  const empty = loadConfig({ text: 'upstream: { url: http://127.0.0.1:3001 }\nstore: { postgres: "${PG_URL}", redis: "" }', env: ENV });
  assert.equal(empty.store.postgres, ENV.DATABASE_URL);
  assert.equal(empty.store.redis, ENV.REDIS_URL);
  const nothing = loadConfig({ text: 'upstream: { url: http://127.0.0.1:3001 }\nstore: { postgres: "${PG_URL}" }', env: { DATABASE_URL: '' } });
  assert.equal(nothing.store.postgres, null, 'empty everywhere → embedded store');
  assert.equal(nothing.store.redis, null, 'empty everywhere → no cache');
});

test('empty flags count as not given', () => {
  const config = loadConfig({ text: FILE, env: ENV, flags: { upstream: '', databaseUrl: '', listen: undefined } });
  assert.equal(config.upstream.url, 'http://127.0.0.1:3001');
  assert.equal(config.store.postgres, 'postgres://file@127.0.0.1:5432/file');
});

test('without a file, --upstream alone is enough', () => {
  const config = loadConfig({ flags: { upstream: 'http://127.0.0.1:3000/' }, env: {} });
  assert.equal(config.upstream.url, 'http://127.0.0.1:3000');
  assert.deepEqual(config.listen, { host: '0.0.0.0', port: 8080 });
  assert.deepEqual(config.admin, { host: '127.0.0.1', port: 9090 });
  assert.equal(config.store.postgres, null);
  assert.equal(config.routes.length, 1);
  assert.equal(config.routes[0]?.name, 'default');
});

test('without a file or --upstream, the error says how to set it', () => {
  assert.throws(
    () => loadConfig({ file: null, env: ENV }),
    (error: ConfigError) =>
      error.code === 'IDEMP_CONFIG_INVALID' &&
      error.errors.length === 1 &&
      error.errors[0] === 'upstream.url: is required: set upstream.url in the file or pass --upstream',
  );
});

test('invalid flag values name the flag', () => {
  assert.throws(
    () => loadConfig({ env: {}, flags: { upstream: 'ftp://x', listen: 'nope', admin: '1.2.3.4:70000', databaseUrl: 'mysql://u:hunter2@h/db', logLevel: 'loud' } }),
    (error: ConfigError) => {
      assert.equal(error.errors.length, 5);
      assert.match(error.errors.join('\n'), /^--upstream: must use http/m);
      assert.match(error.errors.join('\n'), /^--listen: must be "host:port"/m);
      assert.match(error.errors.join('\n'), /^--admin: port must be 0-65535/m);
      assert.match(error.errors.join('\n'), /^--database-url: must be a postgres:\/\/ or postgresql:\/\/ URL/m);
      assert.match(error.errors.join('\n'), /^--log-level: must be one of/m);
      assert.doesNotMatch(error.message, /hunter2/, 'passwords never appear in errors');
      return true;
    },
  );
});

test('a bad DATABASE_URL in the environment is named as such', () => {
  assert.throws(
    () => loadConfig({ flags: { upstream: 'http://127.0.0.1:1' }, env: { DATABASE_URL: 'not a url with secret' } }),
    (error: ConfigError) => error.errors[0]?.startsWith('$DATABASE_URL: must be a postgres://') === true && !error.message.includes('secret'),
  );
});

test('admin can be disabled from the file or a flag', () => {
  for (const text of ['admin: false', 'admin: null', 'admin:', 'admin: "off"', 'admin: ${ADMIN:-false}']) {
    assert.equal(loadConfig({ text: `upstream: { url: http://127.0.0.1:1 }\n${text}`, env: {} }).admin, null, text);
  }
  assert.equal(loadConfig({ text: 'admin: 127.0.0.1:1', flags: { upstream: 'http://127.0.0.1:1', admin: false }, env: {} }).admin, null);
  assert.equal(loadConfig({ flags: { upstream: 'http://127.0.0.1:1', admin: 'off' }, env: {} }).admin, null);
  assert.deepEqual(loadConfig({ text: 'admin: false', flags: { upstream: 'http://127.0.0.1:1', admin: '9091' }, env: {} }).admin, { host: '127.0.0.1', port: 9091 });
});

test('listener addresses: host:port, [ipv6]:port, :port and a bare port', () => {
  const at = (listen: string) => loadConfig({ flags: { upstream: 'http://127.0.0.1:1', listen }, env: {} }).listen;
  assert.deepEqual(at('localhost:0'), { host: 'localhost', port: 0 });
  assert.deepEqual(at('[::]:8080'), { host: '::', port: 8080 });
  assert.deepEqual(at(':8081'), { host: '0.0.0.0', port: 8081 });
  assert.deepEqual(at('8082'), { host: '0.0.0.0', port: 8082 });
  assert.deepEqual(at('10.0.0.1:65535'), { host: '10.0.0.1', port: 65535 });
  for (const bad of ['::1:80', 'host', 'host:', 'host:65536', 'bad_host!:80', '[nope]:80']) {
    assert.throws(() => at(bad), ConfigError, bad);
  }
});

test('upstream must be an http(s) origin', () => {
  const up = (upstream: string) => loadConfig({ flags: { upstream }, env: {} }).upstream.url;
  assert.equal(up('https://api.example.test'), 'https://api.example.test');
  assert.equal(up('http://127.0.0.1:80/'), 'http://127.0.0.1');
  for (const bad of ['127.0.0.1:3000', 'http://127.0.0.1:3000/api', 'http://u:p@127.0.0.1', 'http://127.0.0.1/?a=1', 'ws://127.0.0.1']) {
    assert.throws(() => up(bad), ConfigError, bad);
  }
});

test('reads the file from disk; a missing file is a ConfigError naming it', () => {
  const file = join(dir, 'proxy.yaml');
  writeFileSync(file, FILE);
  assert.equal(loadConfig({ file, env: {} }).upstream.url, 'http://127.0.0.1:3001');
  const missing = join(dir, 'missing.yaml');
  assert.throws(
    () => loadConfig({ file: missing, env: {} }),
    (error: ConfigError) => error.code === 'IDEMP_CONFIG_INVALID' && error.errors[0] === `cannot read config file ${missing}: ENOENT`,
  );
});
