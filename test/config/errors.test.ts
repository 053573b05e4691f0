// An invalid file is rejected with every error listed, each with its path.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../../src/config/errors.js';
import { loadConfig } from '../../src/config/load.js';

const UPSTREAM = 'upstream: { url: http://127.0.0.1:3000 }\n';

function errorsOf(text: string, env: Record<string, string> = {}): readonly string[] {
  try {
    loadConfig({ text, env });
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    assert.equal(error.code, 'IDEMP_CONFIG_INVALID');
    for (const line of error.errors) assert.ok(error.message.includes(line), 'message lists every error');
    return error.errors;
  }
  assert.fail('expected a ConfigError');
}

test('unknown fields at every depth are errors naming their path and line', () => {
  const errors = errorsOf(`${UPSTREAM}lissten: 0.0.0.0:1
store:
  postgress: postgres://x
defaults:
  fingerprint: { headers: [], canonical: true }
  tenant: { fromHeader: x-tenant, extra: 1 }
routes:
  - name: a
    match: { path: /a, method: [POST] }
    ttll: 1h
`);
  assert.deepEqual(errors, [
    'lissten: unknown field (expected one of: listen, admin, adminToken, upstream, store, limits, logLevel, shutdownTimeout, defaults, routes, tracing) (line 2)',
    'store.postgress: unknown field (expected one of: postgres, redis, dataDir, poolSize, idleTimeout, migrate, sweepInterval, sweepBatchSize, timeout, preparedStatements, shardRouting) (line 4)',
    'defaults.fingerprint.canonical: unknown field (expected one of: headers, query, json, exclude) (line 6)',
    'defaults.tenant: must set exactly one of fromHeader, fromHeaderHash, constant, fromClientCert (line 7)',
    'defaults.tenant.extra: unknown field (expected one of: fromHeader, fromHeaderHash, constant, fromClientCert) (line 7)',
    'routes[0].match.method: unknown field (expected one of: methods, path) (line 10)',
    'routes[0].ttll: unknown field (expected one of: name, match, keyHeader, key, methods, required, ttl, lease, maxBodyBytes, maxStoredResponseBytes, tenant, fingerprint, releaseOn, mode, mismatchStatus, onInFlight, waitTimeout, onUnknownOutcome, onExpiredLease, outcomeProbe, onStoreError, storeHeaders, dropHeaders, profile, errorFormat, keyScope, echoKey, record) (line 11)',
  ]);
});

test('schema and semantic errors in one file are all reported, in file order', () => {
  const errors = errorsOf(`
listen: 0.0.0.0:99999
upstream:
  url: http://127.0.0.1:3000/api
  timeout: 30x
  connections: many
defaults:
  ttl: 1h
  lease: 2h
  mode: enforced
routes:
  - name: a
    match: { path: v1/** }
  - name: a
    match: { methods: [FETCH], path: /b }
  - match: { path: /c }
`);
  assert.deepEqual(errors, [
    'listen: port must be 0-65535; got "99999" (line 2)',
    'upstream.url: must be an origin without a path (requests keep their own path); got path "/api" (line 4)',
    'upstream.timeout: invalid duration "30x": use a number with a unit ms, s, m, h or d (e.g. 500ms, 90s, 24h, 1h30m); a plain number means milliseconds (line 5)',
    'upstream.connections: must be a whole number (line 6)',
    'defaults.lease: lease (2h) must not be longer than ttl (1h) (line 9)',
    'defaults.mode: must be one of enforce, shadow, passthrough (got "enforced") (line 10)',
    'routes[0].match.path: must be a path pattern starting with "/" (e.g. /v1/payments/**); got "v1/**" (line 13)',
    'routes[1].name: duplicate route name "a" (also routes[0]) (line 14)',
    'routes[1].match.methods[0]: unknown HTTP method "FETCH" (line 15)',
    'routes[1].match.methods: none of match.methods (FETCH) is in methods (POST, PATCH), so this route never deduplicates: set methods, or mode: passthrough (line 15)',
    'routes[2].name: is required (line 16)',
  ]);
});

test('YAML syntax errors are reported with line:column', () => {
  assert.deepEqual(errorsOf('upstream:\n  url: x\n  url: y\n'), ['YAML syntax error at line 3:3: Map keys must be unique']);
  assert.deepEqual(errorsOf('a: 1\n\tb: 2\n'), ['YAML syntax error at line 2:1: Tabs are not allowed as indentation']);
  const [first] = errorsOf(`${UPSTREAM}routes: [ { name: a }\n`);
  assert.match(first ?? '', /^YAML syntax error at line \d+:\d+: /);
});

test('wrong types name the expected type', () => {
  const errors = errorsOf(`${UPSTREAM}
defaults:
  ttl: [1h]
  required: maybe
  methods: POST
  maxBodyBytes: { a: 1 }
  keyHeader: "Idempotency Key"
  releaseOn: [200, 700, 200]
  mismatchStatus: 409
routes: { name: a }
`);
  assert.deepEqual(errors, [
    'defaults.ttl: must be a duration such as 90s, 24h or 500ms (line 4)',
    'defaults.required: must be true or false (line 5)',
    'defaults.methods: must be a list (line 6)',
    'defaults.maxBodyBytes: must be a size such as 1MiB, 64KiB or 512 (line 7)',
    'defaults.keyHeader: must be a header name (letters, digits and !#$%&\'*+.^_`|~-) (got "Idempotency Key") (line 8)',
    'defaults.releaseOn[1]: must be <= 599 (got 700) (line 9)',
    'defaults.releaseOn: must not list 200 twice (line 9)',
    'defaults.mismatchStatus: must be one of 400, 422 (got 409) (line 10)',
    'routes: must be a list or empty (line 11)',
  ]);
});

test('a lease the heartbeat cannot keep (90ms for 90s) is an error naming where it was set; 100ms is the floor', () => {
  const errors = errorsOf(`${UPSTREAM}
defaults:
  lease: 90ms
routes:
  - name: a
    match: { path: /a }
  - name: b
    match: { path: /b }
    lease: 99ms
  - name: c
    match: { path: /c }
    lease: 100ms
    ttl: 1h
`);
  assert.deepEqual(errors.map((e) => e.replace(/:.*\(line/, ': … (line')), ['defaults.lease: … (line 4)', 'routes[1].lease: … (line 10)']);
  assert.match(errors[0]!, /lease \(90ms\) must be at least 100ms: .*a retry could run the operation again/);
});

test('semantic checks: pointers, exclude without canonical, hop-by-hop storeHeaders, credentials as tenant, limits', () => {
  const errors = errorsOf(`${UPSTREAM}
defaults:
  fingerprint: { exclude: [/ts, "created_at", "/a~2b", ""] }
  storeHeaders: [Set-Cookie, Transfer-Encoding, Proxy-Authenticate]
  dropHeaders: [set-cookie]
  tenant: { fromHeader: Authorization }
  maxBodyBytes: 2GiB
routes:
  - name: hook
    match: { path: /hook }
    key: { fromBody: id }
    lease: 0s
    keyHeader: x-key
  - name: wait
    match: { path: /wait }
    onInFlight: wait
    lease: 10s
    waitTimeout: 30s
`);
  assert.deepEqual(errors, [
    'defaults.fingerprint.exclude[1]: must be a JSON Pointer (RFC 6901) such as /id or /data/object/id; got "created_at" (line 4)',
    'defaults.fingerprint.exclude[2]: must be a JSON Pointer (RFC 6901) such as /id or /data/object/id; got "/a~2b" (line 4)',
    'defaults.fingerprint.exclude[3]: an excluded field must point into the body, not at the whole document ("") (line 4)',
    'defaults.fingerprint.exclude: fingerprint.exclude needs fingerprint.json: canonical (raw bodies are hashed byte for byte) (line 4)',
    'defaults.storeHeaders: transfer-encoding is a hop-by-hop or framing header and is never stored (line 5)',
    'defaults.storeHeaders: proxy-authenticate is a hop-by-hop or framing header and is never stored (line 5)',
    'defaults.dropHeaders: set-cookie is in both storeHeaders and dropHeaders (line 6)',
    'defaults.tenant.fromHeader: authorization carries credentials, which are never stored: use { fromHeaderHash: authorization } (line 7)',
    'defaults.maxBodyBytes: must be at most 1GiB (line 8)',
    'routes[0].key: set either key or keyHeader, not both (line 12)',
    'routes[0].key.fromBody: must be a JSON Pointer (RFC 6901) such as /id or /data/object/id; got "id" (line 12)',
    'routes[0].lease: must be longer than 0 (line 13)',
    'routes[1].waitTimeout: waitTimeout (30s) must not be longer than lease (10s) (line 19)',
  ]);
});

test('a route after a catch-all route is reported as unreachable', () => {
  const errors = errorsOf(`${UPSTREAM}
routes:
  - { name: all, match: { path: /** } }
  - { name: never, match: { path: /v1/** } }
`);
  assert.deepEqual(errors, ['routes[1]: is never used: routes[0] already matches every request (path /** with no methods) (line 5)']);
});

test('a short lease with the wait bound left unset is not an error (the bound follows the lease)', () => {
  const config = loadConfig({ text: `${UPSTREAM}defaults: { lease: 2s, onInFlight: wait }\n`, env: {} });
  assert.equal(config.routes[0]?.waitMs, 2_000);
});

test('the top level must be a mapping', () => {
  assert.deepEqual(errorsOf('- a\n- b\n'), [
    '(top level): must be a mapping',
    'upstream.url: is required: set upstream.url in the file or pass --upstream',
  ]);
});

test('admin: true, empty key/tenant mappings and an empty listen are errors', () => {
  assert.deepEqual(errorsOf(`${UPSTREAM}admin: true\nlisten: ""\ndefaults: { key: {}, tenant: {} }\n`), [
    'admin: must be "host:port", or false to disable the admin listener (line 2)',
    'listen: is empty (is its variable unset?): give "host:port" (line 3)',
    'defaults.key: must set exactly one of fromHeader, fromBody (line 4)',
    'defaults.tenant: must set exactly one of fromHeader, fromHeaderHash, constant, fromClientCert (line 4)',
  ]);
});

test('tracing.protocol: http/protobuf by default, the OTEL_* variables, grpc refused only when tracing is on', () => {
  const on = `${UPSTREAM}tracing: { endpoint: http://127.0.0.1:4318 }\n`;
  assert.equal(loadConfig({ text: on, env: {} }).tracing.protocol, 'http/protobuf');
  assert.equal(loadConfig({ text: on, env: { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' } }).tracing.protocol, 'http/json');
  assert.equal(loadConfig({ text: on, env: { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf' } }).tracing.protocol, 'http/protobuf');
  assert.equal(loadConfig({ text: `${UPSTREAM}tracing: { endpoint: http://127.0.0.1:4318, protocol: http/json }\n`, env: { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' } }).tracing.protocol, 'http/json');
  assert.deepEqual(errorsOf(on, { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }), ['tracing.protocol: OTEL_EXPORTER_OTLP_PROTOCOL=grpc: expected http/protobuf or http/json (OTLP over HTTP; grpc is not supported) (line 2)']);
  assert.equal(loadConfig({ text: UPSTREAM, env: { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' } }).tracing.enabled, false, 'tracing off: the variable is not read');
  assert.match(errorsOf(`${on.trimEnd().slice(0, -2)}, protocol: grpc }\n`).join('\n'), /^tracing\.protocol: /);
});

test('a duration the proxy counts down is at most 24 days (Node timers fire at once past about 24.8); ttl, kept by the store, is not bounded', () => {
  const errors = errorsOf(`upstream: { url: http://127.0.0.1:3000, timeout: 30d, keepAliveTimeout: 25d }
store: { timeout: 1000d, sweepInterval: 24d1ms, idleTimeout: 30d }
shutdownTimeout: 25d
defaults: { ttl: 365d, lease: 40d }
routes:
  - { name: wait, match: { path: /wait }, onInFlight: wait, lease: 24d, waitTimeout: 25d }
`);
  const over = (path: string, given: string, line: number): string =>
    `${path}: must be at most 24d: the proxy times it, and its timers run at most about 24.8 days (${given} given) (line ${line})`;
  assert.deepEqual(errors, [
    over('upstream.timeout', '30d', 1),
    over('upstream.keepAliveTimeout', '25d', 1),
    over('store.idleTimeout', '30d', 2),
    over('store.sweepInterval', '576h1ms', 2),
    over('store.timeout', '1000d', 2),
    over('shutdownTimeout', '25d', 3),
    over('defaults.lease', '40d', 4),
    over('routes[0].waitTimeout', '25d', 6),
    'routes[0].waitTimeout: waitTimeout (25d) must not be longer than lease (24d) (line 6)',
  ]);
  const config = loadConfig({ text: 'upstream: { url: http://127.0.0.1:3000, timeout: 24d }\ndefaults: { ttl: 365d, lease: 24d }\n', env: {} });
  assert.equal(config.upstream.timeoutMs, 24 * 86_400_000);
  assert.equal(config.routes[0]!.leaseMs, 24 * 86_400_000);
  assert.equal(config.routes[0]!.ttlMs, 365 * 86_400_000);
});

test("the client listener's timeouts: each at most 24d and above 0; the headers timeout no longer than the request timeout; defaults where unset", () => {
  const errors = errorsOf(`${UPSTREAM}listen: { address: 127.0.0.1:8080, headersTimeout: 3m, sendTimeout: 0, keepAliveTimeout: 25d }\n`);
  assert.deepEqual(errors, [
    'listen.keepAliveTimeout: must be at most 24d: the proxy times it, and its timers run at most about 24.8 days (25d given) (line 2)',
    'listen.sendTimeout: must be longer than 0 (line 2)',
    'listen.headersTimeout: listen.headersTimeout (3m) must not be longer than listen.requestTimeout (2m): the whole request includes its headers (line 2)',
  ]);
  assert.deepEqual(errorsOf(`${UPSTREAM}listen: { requestTimeout: 10s }\n`), [
    'listen.requestTimeout: listen.headersTimeout (20s) must not be longer than listen.requestTimeout (10s): the whole request includes its headers (line 2)',
  ]);
  const set = loadConfig({ text: `${UPSTREAM}listen: { address: 127.0.0.1:8080, keepAliveTimeout: 650s, sendTimeout: 5m }\n`, env: {} });
  assert.deepEqual(set.listenTimeouts, { headersTimeoutMs: 20_000, requestTimeoutMs: 120_000, keepAliveTimeoutMs: 650_000, sendTimeoutMs: 300_000 });
  const plain = loadConfig({ text: `${UPSTREAM}listen: 127.0.0.1:8080\n`, env: {} });
  assert.deepEqual(plain.listenTimeouts, { headersTimeoutMs: 20_000, requestTimeoutMs: 120_000, keepAliveTimeoutMs: 65_000, sendTimeoutMs: 60_000 });
});

test('a keyed route whose maxBodyBytes is larger than limits.maxBufferedBytes is an error: such a body could never be admitted', () => {
  const tail = 'the memory all buffered request bodies share: a body that large could never be admitted (503 overloaded, for ever); lower maxBodyBytes or raise limits.maxBufferedBytes';
  const errors = errorsOf(`${UPSTREAM}limits: { maxBufferedBytes: 64MiB }
defaults: { maxBodyBytes: 128MiB }
routes:
  - { name: uploads, match: { path: /uploads/** }, maxBodyBytes: 512MiB }
  - { name: files, match: { path: /files/** }, mode: passthrough }
  - { name: pay, match: { path: /pay/** } }
`);
  assert.deepEqual(errors, [
    `defaults.maxBodyBytes: maxBodyBytes (128MiB) must not be larger than limits.maxBufferedBytes (64MiB), ${tail} (line 3)`,
    `routes[0].maxBodyBytes: maxBodyBytes (512MiB) must not be larger than limits.maxBufferedBytes (64MiB), ${tail} (line 5)`,
  ]);
  // The budget below the built-in 1MiB: blamed on the budget.
  assert.deepEqual(errorsOf(`${UPSTREAM}limits: { maxBufferedBytes: 512KiB }\n`), [
    `limits.maxBufferedBytes: maxBodyBytes (1MiB) must not be larger than limits.maxBufferedBytes (512KiB), ${tail} (line 2)`,
  ]);
  // Pass-through routes stream their bodies: any size.
  loadConfig({ text: `${UPSTREAM}limits: { maxBufferedBytes: 512KiB }\nroutes:\n  - { name: all, match: { path: /** }, mode: passthrough }\n`, env: {} });
});
