// mTLS on the listener (listen.tls.clientCa): a client without a certificate
// signed by the client CA is refused in the handshake; `tenant: {
// fromClientCert: subject }` keys each client certificate as its own tenant.
// And the upstream over TLS (upstream.tls): a private CA, a client
// certificate the upstream requires, and the name its certificate carries.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import https from 'node:https';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { uniqueKey } from '../core/support.js';
import { createPki, type Pki } from './certs.js';
import { h2Connect, h2Request, httpsRequest } from './clients.js';

let db: TestDatabase;
let pki: Pki;
let server: { cert: string; key: string };
before(async () => {
  db = await createTestDatabase();
  pki = createPki();
  server = pki.issue('server', '/CN=localhost', { san: 'DNS:localhost,IP:127.0.0.1' });
});
after(async () => {
  await db?.drop();
  pki?.remove();
});

describe('mTLS: listen.tls.clientCa and tenant fromClientCert', () => {
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let a: { cert: Buffer; key: Buffer };
  let b: { cert: Buffer; key: Buffer };
  let stranger: { cert: Buffer; key: Buffer };
  const read = (p: { cert: string; key: string }) => ({ cert: readFileSync(p.cert), key: readFileSync(p.key) });
  before(async () => {
    a = read(pki.issue('client-a', '/O=Acme/CN=client-a', { clientAuth: true }));
    b = read(pki.issue('client-b', '/O=Acme/CN=client-b', { clientAuth: true }));
    const other = createPki('/CN=some other CA');
    stranger = read(other.issue('stranger', '/CN=stranger', { clientAuth: true }));
    other.remove();
    upstream = await startUpstream();
    proxy = await startTestProxy({
      upstream: upstream.url,
      databaseUrl: db.url,
      yaml: `
listen: { address: 127.0.0.1:0, tls: { cert: ${server.cert}, key: ${server.key}, clientCa: ${pki.caFile} }, http2: true }
routes:
  - name: pay
    match: { path: /pay/** }
    tenant: { fromClientCert: subject }
`,
    });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
  });
  const url = () => `https://localhost:${new URL(proxy.url).port}/pay/x`;

  test('a client without a certificate, or with one the client CA did not sign, is refused', async () => {
    const n = upstream.executions();
    await assert.rejects(httpsRequest(url(), { ca: pki.ca, headers: { 'idempotency-key': uniqueKey('none') }, body: 'x' }),
      /certificate required|alert|ECONNRESET|socket hang up/i);
    await assert.rejects(httpsRequest(url(), { ca: pki.ca, ...stranger, headers: { 'idempotency-key': uniqueKey('stranger') }, body: 'x' }),
      /unknown ca|alert|ECONNRESET|socket hang up/i);
    assert.equal(upstream.executions(), n, 'nothing reached the upstream');
  });

  test('two client certificates are two tenants: the same key executes once per tenant, each replays its own', async () => {
    const key = uniqueKey('mtls');
    const n = upstream.executions();
    const send = (c: { cert: Buffer; key: Buffer }) => httpsRequest(url(), { ca: pki.ca, ...c, headers: { 'idempotency-key': key }, body: 'same' });
    const [ra, rb] = await Promise.all([send(a), send(b)]);
    assert.equal(ra.status, 201);
    assert.equal(rb.status, 201);
    assert.equal(upstream.executions() - n, 2, 'once per tenant');
    const [ra2, rb2] = await Promise.all([send(a), send(b)]);
    assert.equal(upstream.executions() - n, 2, 'the retries replay');
    assert.ok(ra2.body.equals(ra.body));
    assert.ok(rb2.body.equals(rb.body));
    assert.notDeepEqual(ra.body, rb.body);
    const rows = await sql<{ tenant_id: string }>(db.url, 'SELECT tenant_id FROM idempotency_keys WHERE idem_key = $1 ORDER BY tenant_id', [key]);
    assert.deepEqual(rows.map((r) => r.tenant_id), ['CN=client-a,O=Acme', 'CN=client-b,O=Acme'], 'the subject in RFC 4514 form');
  });

  test('over HTTP/2 every stream of the connection belongs to its certificate', async () => {
    const key = uniqueKey('mtls-h2');
    const session = await h2Connect(`https://localhost:${new URL(proxy.url).port}`, { ca: pki.ca, ...a });
    try {
      const r = await h2Request(session, '/pay/h2', { 'idempotency-key': key }, 'h2');
      assert.equal(r.status, 201);
    } finally {
      session.close();
    }
    const [row] = await sql<{ tenant_id: string }>(db.url, 'SELECT tenant_id FROM idempotency_keys WHERE idem_key = $1', [key]);
    assert.equal(row?.tenant_id, 'CN=client-a,O=Acme');
  });
});

describe('upstream over TLS: upstream.tls { ca, cert, key, servername }', () => {
  let upstreamPki: Pki;
  let upstreamServer: https.Server;
  let upstreamUrl: string;
  let seenClients: string[];
  let proxyCert: { cert: string; key: string };
  before(async () => {
    upstreamPki = createPki('/CN=upstream CA');
    // The upstream's certificate names payments.internal only: connecting to 127.0.0.1 verifies only with servername.
    const up = upstreamPki.issue('payments', '/CN=payments.internal', { san: 'DNS:payments.internal' });
    proxyCert = pki.issue('proxy-client', '/CN=idempotency-proxy', { clientAuth: true });
    seenClients = [];
    let n = 0;
    upstreamServer = https.createServer({
      cert: readFileSync(up.cert), key: readFileSync(up.key), ca: pki.ca, requestCert: true, rejectUnauthorized: true,
    }, (req, res) => {
      seenClients.push(String((req.socket as TLSSocket).getPeerCertificate().subject?.CN ?? ''));
      req.resume();
      req.on('end', () => {
        res.writeHead(201, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ execution: ++n }));
      });
    });
    await new Promise<void>((r) => upstreamServer.listen(0, '127.0.0.1', r));
    upstreamUrl = `https://127.0.0.1:${(upstreamServer.address() as AddressInfo).port}`;
  });
  after(async () => {
    upstreamServer.closeAllConnections();
    await new Promise((r) => upstreamServer.close(r));
    upstreamPki.remove();
  });

  const withTls = (tls: string) => startTestProxy({
    upstream: upstreamUrl,
    databaseUrl: db.url,
    yaml: `upstream: { tls: ${tls} }\nroutes:\n  - name: pay\n    match: { path: /pay/** }\n    tenant: { constant: t }\n`,
  });
  const post = (proxy: RunningProxy, key: string) => fetch(`${proxy.url}/pay/up`, { method: 'POST', headers: { 'idempotency-key': key }, body: 'x' });

  test('with the private CA, a client certificate and the servername: executed once over TLS, then replayed', async () => {
    const proxy = await withTls(`{ ca: ${upstreamPki.caFile}, cert: ${proxyCert.cert}, key: ${proxyCert.key}, servername: payments.internal }`);
    try {
      const key = uniqueKey('up-tls');
      const first = await post(proxy, key);
      assert.equal(first.status, 201, await first.clone().text());
      const second = await post(proxy, key);
      assert.equal(second.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await second.json(), await first.json());
      assert.deepEqual(seenClients, ['idempotency-proxy'], 'the upstream saw the proxy\'s client certificate, once');
    } finally {
      await proxy.close();
    }
  });

  test('without the servername the certificate does not match 127.0.0.1: 502 before anything is sent', async () => {
    const before = seenClients.length;
    const proxy = await withTls(`{ ca: ${upstreamPki.caFile}, cert: ${proxyCert.cert}, key: ${proxyCert.key} }`);
    try {
      const key = uniqueKey('up-noname');
      const r = await post(proxy, key);
      assert.equal(r.status, 502);
      assert.equal(((await r.json()) as { type: string }).type.split(':').pop(), 'upstream-unreachable', 'a failed handshake is "not sent"');
      const rows = await sql(db.url, 'SELECT 1 FROM idempotency_keys WHERE idem_key = $1', [key]);
      assert.equal(rows.length, 0, 'the key is released: a retry runs once the upstream is fixed');
      assert.equal(seenClients.length, before, 'never reached the upstream');
    } finally {
      await proxy.close();
    }
  });

  test('without the private CA the upstream is not trusted: 502, released', async () => {
    const proxy = await withTls(`{ cert: ${proxyCert.cert}, key: ${proxyCert.key}, servername: payments.internal }`);
    try {
      const r = await post(proxy, uniqueKey('up-noca'));
      assert.equal(r.status, 502);
      assert.equal(((await r.json()) as { type: string }).type.split(':').pop(), 'upstream-unreachable');
    } finally {
      await proxy.close();
    }
  });
});
