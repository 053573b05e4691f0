// Refused TLS handshakes on the listener (src/ops/tls-refusals.ts): logged at
// warn with the peer's address and the reason, a bounded number of lines per
// minute however many arrive, every one counted in
// idempotency_proxy_tls_handshakes_refused_total; a client that only connects
// and leaves (a TCP health check) is counted as disconnected, not warned about.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { metric, metricsText } from '../helpers/metrics.js';
import { startLoggedProxy, type LoggedProxy, type LogLine } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { uniqueKey } from '../core/support.js';
import { createPki, type Pki } from './certs.js';
import { httpsRequest } from './clients.js';

const REFUSED = 'idempotency_proxy_tls_handshakes_refused_total';

let db: TestDatabase;
let pki: Pki;
let upstream: TestUpstream;
let logged: LoggedProxy;
let port: number;

before(async () => {
  db = await createTestDatabase();
  pki = createPki();
  const server = pki.issue('server', '/CN=localhost', { san: 'DNS:localhost,IP:127.0.0.1' });
  upstream = await startUpstream();
  logged = await startLoggedProxy({
    upstream: upstream.url,
    databaseUrl: db.url,
    level: 'debug',
    yaml: `
listen: { address: 127.0.0.1:0, tls: { cert: ${server.cert}, key: ${server.key}, clientCa: ${pki.caFile} } }
routes:
  - name: pay
    match: { path: /pay/** }
    tenant: { fromClientCert: subject }
`,
  });
  port = Number(new URL(logged.proxy.url).port);
});

after(async () => {
  await logged?.proxy.close();
  await upstream?.close();
  await db?.drop();
  pki?.remove();
});

const refusals = (): LogLine[] => logged.lines.filter((l) => l.msg?.startsWith('TLS handshake refused') === true);
const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 100));

/** Plain HTTP to the TLS port: the server's handshake fails on the first bytes. */
function plainHttp(): Promise<void> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => s.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n'));
    s.on('error', () => resolve());
    s.on('close', () => resolve());
  });
}

describe('refused TLS handshakes', () => {
  test('no client certificate under mTLS: a warn line with the peer address and reason, and the counter', async () => {
    const before = metric(await metricsText(logged.proxy.adminUrl), REFUSED, { reason: 'no_client_certificate' });
    await assert.rejects(httpsRequest(`https://localhost:${port}/pay/x`, { ca: pki.ca, headers: { 'idempotency-key': uniqueKey('nocert') }, body: 'x' }));
    await settle();
    const line = refusals().find((l) => l.reason === 'no_client_certificate');
    assert.ok(line, `no warn line: ${JSON.stringify(logged.lines.slice(-5))}`);
    assert.equal(line.level, 'warn');
    assert.match(String(line.peer), /^127\.0\.0\.1:\d+$/);
    assert.equal(metric(await metricsText(logged.proxy.adminUrl), REFUSED, { reason: 'no_client_certificate' }) - before, 1);
  });

  test('a flood of plain-HTTP connections: every one counted, at most 10 lines logged in the minute', async () => {
    const text = await metricsText(logged.proxy.adminUrl);
    const before = metric(text, REFUSED, { reason: 'protocol' });
    const linesBefore = refusals().length;
    await Promise.all(Array.from({ length: 40 }, plainHttp));
    await settle();
    assert.equal(metric(await metricsText(logged.proxy.adminUrl), REFUSED, { reason: 'protocol' }) - before, 40);
    const lines = refusals();
    assert.ok(lines.length <= 10, `${lines.length} refusal lines logged in one minute`);
    assert.ok(lines.length > linesBefore, 'the first ones are logged');
    const protocol = lines.find((l) => l.reason === 'protocol');
    assert.ok(protocol, 'a protocol refusal was logged');
    assert.match(String(protocol.code), /^ERR_SSL_/);
    assert.match(String(lines.at(-1)!.msg), /further refusals this minute are counted, not logged/);
  });

  test('a client that connects and leaves is counted as disconnected, never warned about', async () => {
    const before = metric(await metricsText(logged.proxy.adminUrl), REFUSED, { reason: 'disconnected' });
    const warns = logged.lines.filter((l) => l.level === 'warn').length;
    await new Promise<void>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => s.end());
      s.on('close', () => resolve());
    });
    await settle();
    assert.equal(metric(await metricsText(logged.proxy.adminUrl), REFUSED, { reason: 'disconnected' }) - before, 1);
    assert.equal(logged.lines.filter((l) => l.level === 'warn').length, warns);
  });
});
