// The upstream's TLS files (upstream.tls: CA bundle, client certificate and
// key) re-read on SIGHUP, as the listener's are (src/ops/tls-reload.ts): the
// proxy as a real process in front of an HTTPS upstream that requires a
// client certificate and closes its connection after every answer, so each
// request shows what a new connection presents and trusts.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, readFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { spawnProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { tempDir, type TempDir } from '../helpers/tmp.js';
import { uniqueKey } from '../core/support.js';
import { waitForLine } from '../ops/support.js';
import { createPki, type Pki } from './certs.js';

let db: TestDatabase;
let clientPki: Pki; // signs the proxy's client certificates; the upstream trusts it
let upstreamPki: Pki; // signs the upstream's first certificate
let dir: TempDir;
let upstream: https.Server;
let proxy: SpawnedProxy;
let config: string;
const live = { ca: '', cert: '', key: '' };
const seen: string[] = []; // the O= of the client certificate of each request

const yaml = (ca: string): string => `
upstream: { tls: { ca: ${ca}, cert: ${live.cert}, key: ${live.key}, servername: payments.internal } }
routes:
  - name: pay
    match: { path: /pay/** }
    tenant: { constant: t }
`;

before(async () => {
  db = await createTestDatabase();
  clientPki = createPki('/CN=client CA');
  upstreamPki = createPki('/CN=upstream CA one');
  dir = tempDir('idem-upstream-tls-reload-');
  Object.assign(live, { ca: `${dir.dir}/upstream-ca.crt`, cert: `${dir.dir}/client.crt`, key: `${dir.dir}/client.key` });
  copyFileSync(upstreamPki.caFile, live.ca);
  const first = clientPki.issue('first', '/O=first/CN=proxy', { clientAuth: true });
  copyFileSync(first.cert, live.cert);
  copyFileSync(first.key, live.key);
  const up = upstreamPki.issue('payments', '/CN=payments.internal', { san: 'DNS:payments.internal' });
  upstream = https.createServer({ cert: readFileSync(up.cert), key: readFileSync(up.key), ca: clientPki.ca, requestCert: true, rejectUnauthorized: true }, (req, res) => {
    seen.push(String((req.socket as TLSSocket).getPeerCertificate().subject?.O ?? ''));
    req.resume();
    req.on('end', () => {
      res.writeHead(201, { 'content-type': 'application/json', connection: 'close' });
      res.end(JSON.stringify({ n: seen.length }));
    });
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  config = dir.write('proxy.yaml', yaml(live.ca));
  const url = `https://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  proxy = await spawnProxy(['serve', '--config', config, '--upstream', url, '--admin', 'off', '--database-url', db.url]);
});

after(async () => {
  await proxy?.kill();
  upstream?.closeAllConnections();
  await new Promise((r) => upstream?.close(r));
  await db?.drop();
  dir?.remove();
  clientPki?.remove();
  upstreamPki?.remove();
});

const post = (): Promise<Response> => fetch(`${proxy.url}/pay/x`, { method: 'POST', headers: { 'idempotency-key': uniqueKey('up') }, body: 'x' });
const hup = async (match: RegExp) => {
  const from = proxy.lines.length;
  proxy.proc.kill('SIGHUP');
  return waitForLine(proxy.lines, (l) => typeof l.msg === 'string' && match.test(l.msg), 5000, from);
};

test('a client certificate replaced on disk: after SIGHUP new upstream connections present the new one', async () => {
  assert.equal((await post()).status, 201);
  assert.equal(seen.at(-1), 'first');
  const second = clientPki.issue('second', '/O=second/CN=proxy', { clientAuth: true });
  copyFileSync(second.cert, live.cert);
  copyFileSync(second.key, live.key);
  assert.equal((await post()).status, 201);
  assert.equal(seen.at(-1), 'first', 'read at start, not on every connection: nothing changes before the signal');
  const line = await hup(/configuration reloaded/);
  assert.deepEqual(line.changed, ['upstream.tls']);
  assert.equal((await post()).status, 201);
  assert.equal(seen.at(-1), 'second');
});

test('the upstream moves to another CA: a new CA bundle at a new path, SIGHUP, and it is trusted', async () => {
  const otherCa = createPki('/CN=upstream CA two');
  try {
    const up = otherCa.issue('payments2', '/CN=payments.internal', { san: 'DNS:payments.internal' });
    upstream.setSecureContext({ cert: readFileSync(up.cert), key: readFileSync(up.key), ca: clientPki.ca });
    const refused = await post();
    assert.equal(refused.status, 502, 'the old bundle does not trust the new CA');
    const newPath = `${dir.dir}/upstream-ca-two.crt`;
    copyFileSync(otherCa.caFile, newPath);
    dir.write('proxy.yaml', yaml(newPath));
    const from = proxy.lines.length;
    const line = await hup(/configuration reloaded/);
    assert.deepEqual(line.changed, ['upstream.tls'], 'a new path is live, not a restart');
    assert.ok(!proxy.lines.slice(from).some((l) => l.includes('only take effect on restart')), 'no restart asked for');
    assert.equal((await post()).status, 201);
  } finally {
    otherCa.remove();
  }
});

test('a client key that does not match its certificate rejects the reload; the running one stays', async () => {
  const third = clientPki.issue('third', '/O=third/CN=proxy', { clientAuth: true });
  copyFileSync(third.cert, live.cert); // the key is still the second one's
  const line = await hup(/configuration reload rejected/);
  assert.match(String((line.errors as string[])[0]), /^upstream\.tls\.key: the certificate and key cannot be used together/);
  assert.equal((await post()).status, 201);
  assert.equal(seen.at(-1), 'second');
});
