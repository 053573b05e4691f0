import { test } from 'node:test';
import assert from 'node:assert/strict';
import { interpolate } from '../../src/config/interpolate.js';
import { Issues, formatPath } from '../../src/config/issues.js';
import { ConfigError } from '../../src/config/errors.js';
import { loadConfig } from '../../src/config/load.js';

const env = { HOST: 'db.internal', PORT: '5432', EMPTY: '', TTL: '2h' };

function run(tree: unknown): { out: unknown; errors: string[] } {
  const issues = new Issues();
  const out = interpolate(tree, env, issues);
  return { out, errors: issues.list.map((i) => `${formatPath(i.path)}: ${i.message}`) };
}

test('${VAR} and ${VAR:-default} in every string scalar, nested at any depth', () => {
  const { out, errors } = run({
    a: 'postgres://${HOST}:${PORT}/app',
    list: ['${HOST}', { deep: '${MISSING:-fallback}' }],
    empty: '${EMPTY:-used when empty}',
    unset: 'x${MISSING}y',
    set: '${HOST:-not used}',
    defaultWithColon: '${MISSING:-127.0.0.1:9090}',
    number: 42,
    bool: true,
    nil: null,
  });
  assert.deepEqual(errors, []);
  assert.deepEqual(out, {
    a: 'postgres://db.internal:5432/app',
    list: ['db.internal', { deep: 'fallback' }],
    empty: 'used when empty',
    unset: 'xy',
    set: 'db.internal',
    defaultWithColon: '127.0.0.1:9090',
    number: 42,
    bool: true,
    nil: null,
  });
});

test('map keys are not interpolated, $${ is a literal ${', () => {
  const { out } = run({ '${HOST}': 'pa$${word}', plain: 'no $ref here $HOST' });
  assert.deepEqual(out, { '${HOST}': 'pa${word}', plain: 'no $ref here $HOST' });
});

test('a value cannot inject YAML structure', () => {
  const config = loadConfig({
    text: 'upstream: { url: "${U}" }\nadminToken: ${T}\n',
    env: { U: 'http://127.0.0.1:1', T: 'x\nroutes: []\nlisten: 1.2.3.4:1' },
  });
  assert.equal(config.adminToken, 'x\nroutes: []\nlisten: 1.2.3.4:1');
  assert.equal(config.listen.port, 8080);
});

test('malformed references are errors naming their path', () => {
  const { errors } = run({ a: { b: 'x ${UNCLOSED' }, c: ['${1BAD}', '${A:-${B}}'] });
  assert.equal(errors.length, 3);
  assert.match(errors[0] as string, /^a\.b: unterminated "\$\{"/);
  assert.match(errors[1] as string, /^c\[0\]: invalid variable reference "\$\{1BAD\}"/);
  assert.match(errors[2] as string, /^c\[1\]: nested reference/);
});

test('interpolated numbers, booleans and durations reach their typed fields', () => {
  const config = loadConfig({
    text: [
      'upstream: { url: "http://127.0.0.1:${UP_PORT}", connections: "${CONNS:-64}", timeout: "${TIMEOUT:-10s}" }',
      'store: { migrate: "${MIGRATE}", poolSize: "${POOL:-4}" }',
      'defaults: { ttl: "${TTL}", required: "${REQ:-true}", mismatchStatus: "${MS:-400}" }',
    ].join('\n'),
    env: { UP_PORT: '3000', MIGRATE: 'false', TTL: '2h' },
  });
  assert.equal(config.upstream.url, 'http://127.0.0.1:3000');
  assert.equal(config.upstream.connections, 64);
  assert.equal(config.upstream.timeoutMs, 10_000);
  assert.equal(config.store.migrate, false);
  assert.equal(config.store.poolSize, 4);
  const route = config.routes[0];
  assert.equal(route?.ttlMs, 7_200_000);
  assert.equal(route?.required, true);
  assert.equal(route?.mismatchStatus, 400);
});

test('an unset variable in a required field is an error, not a silent default', () => {
  assert.throws(
    () => loadConfig({ text: 'upstream: { url: "${UPSTREAM}" }\ndefaults: { ttl: "${TTL}" }\n', env: {} }),
    (error: ConfigError) => {
      assert.deepEqual(error.errors, [
        'upstream.url: is required: set upstream.url in the file or pass --upstream (line 1)',
        'defaults.ttl: empty duration: use a number with a unit ms, s, m, h or d (e.g. 500ms, 90s, 24h, 1h30m); a plain number means milliseconds (line 2)',
      ]);
      return true;
    },
  );
});

test('an empty adminToken fails closed instead of disabling authentication', () => {
  assert.throws(
    () => loadConfig({ text: 'upstream: { url: "http://127.0.0.1:1" }\nadminToken: ${ADMIN_TOKEN}\n', env: {} }),
    (error: ConfigError) => /^adminToken: is empty/.test(error.errors[0] ?? ''),
  );
  const ok = loadConfig({ text: 'upstream: { url: "http://127.0.0.1:1" }\nadminToken: ${ADMIN_TOKEN}\n', env: { ADMIN_TOKEN: 's3cret' } });
  assert.equal(ok.adminToken, 's3cret');
});
