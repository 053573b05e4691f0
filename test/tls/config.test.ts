// listen { address, tls, http2 } and upstream.tls in the configuration: the
// shape docs/configuration.md (Listener: TLS and HTTP/2) shows loads, and
// every bad value is an error naming its field.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { ConfigError } from '../../src/config/errors.js';
import { loadConfig } from '../../src/config/load.js';
import { planReload } from '../../src/ops/reload-plan.js';
import { createPki, type Pki } from './certs.js';

let pki: Pki;
let srv: { cert: string; key: string };
let other: { cert: string; key: string };
before(() => {
  pki = createPki();
  srv = pki.issue('srv', '/CN=localhost', { san: 'DNS:localhost' });
  other = pki.issue('other', '/CN=other');
});
after(() => pki?.remove());

function errorsOf(text: string): readonly string[] {
  try {
    loadConfig({ text, env: {} });
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    // Every error names its line too; these assertions are about the field and the words.
    return error.errors.map((e) => e.replace(/ \(line \d+\)$/, ''));
  }
  assert.fail('expected a ConfigError');
}

test('the documented listen / upstream.tls shape loads; a plain host:port string still does', () => {
  const c = loadConfig({
    text: `
listen: { address: 0.0.0.0:8443, tls: { cert: ${srv.cert}, key: ${srv.key}, clientCa: ${pki.caFile} }, http2: true }
upstream: { url: https://payments.internal:8443, tls: { ca: ${pki.caFile}, cert: ${other.cert}, key: ${other.key}, servername: payments.internal } }
routes:
  - name: pay
    match: { path: /pay/** }
    tenant: { fromClientCert: subject }
`,
    env: {},
  });
  assert.deepEqual(c.listen, { host: '0.0.0.0', port: 8443 });
  assert.deepEqual(c.listenTls, { cert: srv.cert, key: srv.key, clientCa: pki.caFile });
  assert.equal(c.http2, true);
  assert.deepEqual(c.upstream.tls, { ca: pki.caFile, cert: other.cert, key: other.key, servername: 'payments.internal' });
  assert.deepEqual(c.routes[0]!.tenant, { kind: 'fromClientCert', field: 'subject' });
  const plain = loadConfig({ text: 'listen: 127.0.0.1:9000\nupstream: { url: http://127.0.0.1:1 }\n', env: {} });
  assert.deepEqual(plain.listen, { host: '127.0.0.1', port: 9000 });
  assert.equal(plain.listenTls, null);
  assert.equal(plain.http2, false);
  const flag = loadConfig({ text: `listen: { address: 0.0.0.0:8443, tls: { cert: ${srv.cert}, key: ${srv.key} } }\nupstream: { url: http://127.0.0.1:1 }\n`, env: {}, flags: { listen: '127.0.0.1:0' } });
  assert.deepEqual(flag.listen, { host: '127.0.0.1', port: 0 }, '--listen replaces the address');
  assert.equal(flag.listenTls?.cert, srv.cert, '… and keeps tls');
});

test('every bad TLS or HTTP/2 value names its field', () => {
  const garbage = path.join(pki.dir, 'garbage.pem');
  writeFileSync(garbage, 'not a certificate\n');
  const up = 'upstream: { url: http://127.0.0.1:1 }\n';
  assert.deepEqual(errorsOf(`${up}listen: { address: 127.0.0.1:1, tls: { cert: /nonexistent/tls.crt, key: ${srv.key} } }`),
    ['listen.tls.cert: cannot read "/nonexistent/tls.crt" (no such file)']);
  assert.deepEqual(errorsOf(`${up}listen: { tls: { key: ${srv.key} } }`), ['listen.tls.cert: is required']);
  assert.deepEqual(errorsOf(`${up}listen: { tls: { cert: ${srv.cert} } }`), ['listen.tls.key: is required']);
  assert.deepEqual(errorsOf(`${up}listen: { http2: yes please }`), ['listen.http2: must be true or false']);
  assert.deepEqual(errorsOf(`${up}listen: { adress: 127.0.0.1:1 }`), ['listen.adress: unknown field (expected one of: address, tls, http2, headersTimeout, requestTimeout, keepAliveTimeout, sendTimeout)']);
  assert.deepEqual(errorsOf(`${up}listen: { address: nope }`), ['listen.address: must be "host:port" (e.g. 0.0.0.0:8080, [::1]:8080 or :8080); got "nope" (no port)']);
  assert.deepEqual(errorsOf(`${up}listen: { tls: { cert: ${srv.cert}, key: ${other.key} } }`).map((e) => e.replace(/\(error:.*\)/, '(…)')),
    ['listen.tls.key: the certificate and key cannot be used together (…)']);
  assert.deepEqual(errorsOf(`${up}listen: { tls: { cert: ${garbage}, key: ${srv.key} } }`),
    [`listen.tls.cert: "${garbage}" holds no PEM certificate (-----BEGIN CERTIFICATE-----)`]);
  assert.deepEqual(errorsOf(`${up}listen: { tls: { cert: ${srv.cert}, key: ${srv.key}, clientCa: ${garbage} } }`),
    [`listen.tls.clientCa: "${garbage}" holds no PEM certificate (-----BEGIN CERTIFICATE-----)`]);
  assert.deepEqual(errorsOf(`${up}routes:\n  - name: a\n    match: { path: /a }\n    tenant: { fromClientCert: subject }\n`),
    ['routes[0].tenant.fromClientCert: route a takes its tenant from the client certificate: set listen.tls.clientCa so the listener requires and verifies one']);
  assert.deepEqual(errorsOf(`${up}routes:\n  - name: a\n    match: { path: /a }\n    tenant: { fromClientCert: issuer }\n`),
    ['routes[0].tenant.fromClientCert: must be one of subject (got "issuer")']);
  assert.deepEqual(errorsOf(`upstream: { url: http://127.0.0.1:1, tls: { ca: ${pki.caFile} } }\n`),
    ['upstream.tls: is only used with an https:// upstream.url (got http://127.0.0.1:1)']);
  assert.deepEqual(errorsOf(`upstream: { url: https://127.0.0.1:1, tls: { cert: ${other.cert} } }\n`),
    ['upstream.tls.key: is required with upstream.tls.cert (the client certificate\'s private key)']);
  assert.deepEqual(errorsOf(`upstream: { url: https://127.0.0.1:1, tls: { ca: /nonexistent/ca.crt, servername: "" } }\n`),
    ['upstream.tls.servername: must not be empty', 'upstream.tls.ca: cannot read "/nonexistent/ca.crt" (no such file)']);
});

test('a reload may move the certificate files; switching TLS or mTLS on or off, or HTTP/2, needs a restart', () => {
  const load = (listen: string) => loadConfig({ text: `listen: ${listen}\nupstream: { url: http://127.0.0.1:1 }\n`, env: {} });
  const a = load(`{ tls: { cert: ${srv.cert}, key: ${srv.key} } }`);
  const moved = planReload(a, load(`{ tls: { cert: ${other.cert}, key: ${other.key} } }`));
  assert.deepEqual(moved.restartNeeded, []);
  assert.equal(moved.config.listenTls?.cert, other.cert, 'the new paths are the running ones');
  assert.deepEqual(planReload(a, load('0.0.0.0:8080')).restartNeeded, ['listen.tls']);
  assert.deepEqual(planReload(a, load(`{ tls: { cert: ${srv.cert}, key: ${srv.key}, clientCa: ${pki.caFile} } }`)).restartNeeded, ['listen.tls']);
  assert.deepEqual(planReload(a, load(`{ tls: { cert: ${srv.cert}, key: ${srv.key} }, http2: true }`)).restartNeeded, ['listen.http2']);
  // The listener's timeouts are set on it when it starts: named by their YAML paths.
  const timed = planReload(a, load(`{ tls: { cert: ${srv.cert}, key: ${srv.key} }, keepAliveTimeout: 620s, sendTimeout: 5m }`));
  assert.deepEqual(timed.restartNeeded, ['listen.keepAliveTimeout', 'listen.sendTimeout']);
  assert.equal(timed.config.listenTimeouts.keepAliveTimeoutMs, 65_000, 'the running value is kept');
});
