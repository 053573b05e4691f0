// onExpiredLease: probe and outcomeProbe: per route and in defaults like the
// other policy fields; every mistake is an error naming the field.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../../src/config/errors.js';
import { loadConfig } from '../../src/config/load.js';
import { compileProbe } from '../../src/proxy/probe.js';

const UPSTREAM = 'upstream: { url: http://127.0.0.1:3000 }\n';
const load = (text: string) => loadConfig({ text: UPSTREAM + text, env: {} });

function errorsOf(text: string): readonly string[] {
  try {
    load(text);
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.errors;
  }
  assert.fail('the configuration loaded; it should not have');
}

test('probe per route and in defaults: the route inherits outcomeProbe like any policy field, method upper-cased', () => {
  const config = load(`
defaults:
  outcomeProbe: { method: get, path: "/v1/orders/by-idempotency-key/{key}" }
routes:
  - name: orders
    match: { path: /v1/orders }
    onExpiredLease: probe
  - name: refunds
    match: { path: /v1/refunds }
    onExpiredLease: probe
    outcomeProbe: { method: HEAD, path: "/v1/refunds?idempotency_key={key}" }
  - name: other
    match: { path: /other }
`);
  const [orders, refunds, other] = config.routes;
  assert.equal(orders!.onExpiredLease, 'probe');
  assert.deepEqual(orders!.outcomeProbe, { method: 'GET', path: '/v1/orders/by-idempotency-key/{key}' });
  assert.deepEqual(refunds!.outcomeProbe, { method: 'HEAD', path: '/v1/refunds?idempotency_key={key}' });
  // Inherited but unused (reexecute): compiled to nothing.
  assert.equal(other!.onExpiredLease, 'reexecute');
  assert.equal(compileProbe(other!), null);
  const probe = compileProbe(orders!)!;
  assert.equal(probe.path('a/b?c%d é'), '/v1/orders/by-idempotency-key/a%2Fb%3Fc%25d%20%C3%A9');
  assert.equal(compileProbe(refunds!)!.path('k-1'), '/v1/refunds?idempotency_key=k-1');
  // The probe carries the credential, the tenant's header and the key header.
  assert.deepEqual([...probe.copied].sort(), ['authorization', 'host', 'idempotency-key']);
});

test('the probe copies the tenant header and the route\'s key header; a body key goes as Idempotency-Key', () => {
  const config = load(`
routes:
  - name: hooks
    match: { path: /hooks }
    key: { fromBody: /id }
    tenant: { fromHeader: x-account }
    onExpiredLease: probe
    outcomeProbe: { method: GET, path: "/events/{key}" }
  - name: ce
    match: { path: /ce }
    key: { fromHeader: ce-id }
    onExpiredLease: probe
    outcomeProbe: { method: GET, path: "/events/{key}/{key}" }
`);
  const hooks = compileProbe(config.routes[0]!)!;
  assert.deepEqual([...hooks.copied].sort(), ['authorization', 'host', 'x-account']);
  assert.equal(hooks.keyHeader, 'idempotency-key');
  const ce = compileProbe(config.routes[1]!)!;
  assert.ok(ce.copied.includes('ce-id'));
  assert.equal(ce.keyHeader, null);
  assert.equal(ce.path('x y'), '/events/x%20y/x%20y');
});

test('onExpiredLease: probe without outcomeProbe is an error naming the field', () => {
  assert.deepEqual(errorsOf(`
routes:
  - name: orders
    match: { path: /v1/orders }
    onExpiredLease: probe
`), ['routes[0].onExpiredLease: onExpiredLease: probe needs outcomeProbe: { method, path }, the request that asks the upstream whether the operation ran (e.g. { method: GET, path: "/v1/orders/by-idempotency-key/{key}" }) (line 6)']);
  // Set in defaults, the error names defaults (every route inherits it; each says so).
  const errors = errorsOf('defaults: { onExpiredLease: probe }\nroutes:\n  - { name: a, match: { path: /a } }\n');
  assert.equal(errors.length, 1);
  assert.match(errors[0]!, /^defaults\.onExpiredLease: onExpiredLease: probe needs outcomeProbe/);
});

test('outcomeProbe where nothing probes is an error: on the route, or in defaults when no route probes', () => {
  assert.deepEqual(errorsOf(`
routes:
  - name: orders
    match: { path: /v1/orders }
    onExpiredLease: fail
    outcomeProbe: { method: GET, path: "/v1/orders/{key}" }
`), ['routes[0].outcomeProbe: outcomeProbe is never sent: onExpiredLease is fail; set onExpiredLease: probe, or remove outcomeProbe (line 7)']);
  assert.deepEqual(errorsOf(`
defaults:
  outcomeProbe: { method: GET, path: "/v1/orders/{key}" }
routes:
  - name: orders
    match: { path: /v1/orders }
`), ['defaults.outcomeProbe: outcomeProbe is never sent: no route has onExpiredLease: probe; set it, or remove outcomeProbe (line 4)']);
});

test('a bad method, a path not starting with "/", another placeholder, a missing or unknown field: errors naming the field', () => {
  const route = (probe: string) => `
routes:
  - name: orders
    match: { path: /v1/orders }
    onExpiredLease: probe
    outcomeProbe: ${probe}
`;
  assert.deepEqual(errorsOf(route('{ method: POST, path: "/v1/orders/{key}" }')),
    ['routes[0].outcomeProbe.method: must be GET or HEAD (the probe asks whether the operation ran; it must change nothing); got "POST" (line 7)']);
  assert.deepEqual(errorsOf(route('{ method: GET, path: "v1/orders/{key}" }')),
    ['routes[0].outcomeProbe.path: must be a path starting with "/", without spaces or a fragment (e.g. /v1/orders/by-idempotency-key/{key}); got "v1/orders/{key}" (line 7)']);
  assert.deepEqual(errorsOf(route('{ method: GET, path: "http://other/{key}" }')).length, 1);
  assert.deepEqual(errorsOf(route('{ method: GET, path: "/v1/orders/{id}" }')),
    ['routes[0].outcomeProbe.path: {key} is the only placeholder (the URL-encoded key); got "/v1/orders/{id}" (line 7)']);
  const missing = errorsOf(route('{ method: GET }'));
  assert.ok(missing.some((e) => e.startsWith('routes[0].outcomeProbe') && /path/.test(e)), missing.join('\n'));
  const unknown = errorsOf(route('{ method: GET, path: "/x/{key}", timeout: 1s }'));
  assert.ok(unknown.some((e) => e.startsWith('routes[0].outcomeProbe.timeout: unknown field')), unknown.join('\n'));
  const badPolicy = errorsOf(route('{ method: GET, path: "/x/{key}" }').replace('onExpiredLease: probe', 'onExpiredLease: ask'));
  assert.ok(badPolicy.some((e) => e.startsWith('routes[0].onExpiredLease') && /reexecute.*fail.*probe/.test(e)), badPolicy.join('\n'));
});
