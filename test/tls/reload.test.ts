// The listener's certificate swapped on disk and SIGHUP (docs/operations.md,
// Certificates): the proxy as a real process; a slow request on a connection
// opened before the swap completes on it; a new connection is served the new
// certificate; a swap to a key that does not match is rejected and the
// running certificate kept.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, readFileSync } from 'node:fs';
import https from 'node:https';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { spawnProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { uniqueKey } from '../core/support.js';
import { waitForLine } from '../ops/support.js';
import { tempDir, type TempDir } from '../helpers/tmp.js';
import { createPki, type Pki } from './certs.js';
import { httpsRequest } from './clients.js';

let db: TestDatabase;
let pki: Pki;
let upstream: TestUpstream;
let dir: TempDir;
let proxy: SpawnedProxy;
let live: { cert: string; key: string };

before(async () => {
  db = await createTestDatabase();
  pki = createPki();
  dir = tempDir('idem-tls-reload-');
  const first = pki.issue('first', '/CN=localhost/O=first', { san: 'DNS:localhost' });
  live = { cert: `${dir.dir}/tls.crt`, key: `${dir.dir}/tls.key` };
  copyFileSync(first.cert, live.cert);
  copyFileSync(first.key, live.key);
  upstream = await startUpstream(async (req, n, res) => {
    const delay = Number(/delay=(\d+)/.exec(req.url)?.[1] ?? 0);
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ execution: n }));
  });
  const file = dir.write('proxy.yaml', `
listen: { address: 127.0.0.1:0, tls: { cert: ${live.cert}, key: ${live.key} }, http2: true }
routes:
  - name: pay
    match: { path: /pay/** }
    tenant: { constant: t }
`);
  proxy = await spawnProxy(['serve', '--config', file, '--upstream', upstream.url, '--admin', 'off', '--database-url', db.url]);
});

after(async () => {
  await proxy?.kill();
  await upstream?.close();
  await db?.drop();
  dir?.remove();
  pki?.remove();
});

const url = (path: string) => `https://localhost:${new URL(proxy.url).port}${path}`;
const served = async (): Promise<string> => {
  const r = await httpsRequest(url('/pay/probe'), { ca: pki.ca, method: 'GET' });
  return String(r.peer?.subject.O);
};
const hup = async (match: RegExp) => {
  const from = proxy.lines.length;
  proxy.proc.kill('SIGHUP');
  return waitForLine(proxy.lines, (l) => typeof l.msg === 'string' && match.test(l.msg), 5000, from);
};

test('SIGHUP swaps in the new certificate for new connections; a request in flight on an old one completes', async () => {
  assert.equal(await served(), 'first');
  // A keep-alive connection opened before the swap, with a slow request on it.
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: pki.ca });
  try {
    const slow = httpsRequest(url('/pay/slow?delay=1500'), { ca: pki.ca, agent, headers: { 'idempotency-key': uniqueKey('slow') }, body: 'x' });
    await new Promise((r) => setTimeout(r, 300));
    const second = pki.issue('second', '/CN=localhost/O=second', { san: 'DNS:localhost' });
    copyFileSync(second.cert, live.cert);
    copyFileSync(second.key, live.key);
    const line = await hup(/configuration reloaded/);
    assert.deepEqual(line.changed, ['listen.tls']);
    assert.equal(await served(), 'second', 'a new connection gets the new certificate');
    const r = await slow;
    assert.equal(r.status, 201, 'the request in flight was not dropped');
    assert.equal(r.peer?.subject.O, 'first', 'it finished on its connection, with the old certificate');
  } finally {
    agent.destroy();
  }
});

test('a swap to a key that does not match the certificate is rejected; the running certificate stays', async () => {
  const third = pki.issue('third', '/CN=localhost/O=third', { san: 'DNS:localhost' });
  const before = readFileSync(live.key);
  copyFileSync(third.cert, live.cert); // the key is still the second one's
  const line = await hup(/configuration reload rejected/);
  assert.match(String((line.errors as string[])[0]), /^listen\.tls\.key: the certificate and key cannot be used together/);
  assert.equal(await served(), 'second');
  assert.ok(readFileSync(live.key).equals(before));
});
