// The proxy as a real process under signals: SIGHUP swaps in the routes of the
// re-read file for new requests (in-flight ones keep theirs; an invalid file
// keeps the old configuration and the log says why); SIGTERM lets the request
// in flight finish and commit, refuses new connections, and exits 0.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import net from 'node:net';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { spawnProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { waitForLine } from './support.js';
import { tempDir, type TempDir } from '../helpers/tmp.js';
import { sleep, waitFor } from '../helpers/wait.js';

const FIRST = `
shutdownTimeout: 20s
routes:
  - name: pay
    match: { path: /pay/** }
    tenant: { constant: t }
`;

const SECOND = `
shutdownTimeout: 20s
upstream: { timeout: 12s }
routes:
  - name: pay
    match: { path: /pay/** }
    mode: passthrough
  - name: fresh
    match: { path: /new/** }
    tenant: { constant: t }
`;

let db: TestDatabase;
let upstream: TestUpstream;
let dir: TempDir;
let proxy: SpawnedProxy;
let file: string;

before(async () => {
  db = await createTestDatabase();
  upstream = await startUpstream(async (req, n, res) => {
    const delay = Number(/delay=(\d+)/.exec(req.url)?.[1] ?? 0);
    if (delay > 0) await sleep(delay);
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ execution: n, filler: 'x'.repeat(20_000) }));
  });
  dir = tempDir();
  file = dir.write('proxy.yaml', FIRST);
  proxy = await spawnProxy(['serve', '--config', file, '--upstream', upstream.url, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', '--database-url', db.url]);
});

after(async () => {
  await proxy?.kill();
  await upstream?.close();
  await db?.drop();
  dir?.remove();
});

const post = (path: string, key: string) => send(`${proxy.url}${path}`, { headers: { 'idempotency-key': key }, body: 'x' });
const twice = async (path: string): Promise<[number, boolean]> => {
  const key = randomUUID();
  const before = upstream.executions();
  await post(path, key);
  const second = await post(path, key);
  return [upstream.executions() - before, second.headers['idempotent-replayed'] === 'true'];
};
const hup = async (match: (msg: string) => boolean) => {
  const from = proxy.lines.length;
  proxy.proc.kill('SIGHUP');
  return waitForLine(proxy.lines, (l) => typeof l.msg === 'string' && match(l.msg), 5000, from);
};

describe('SIGHUP', () => {
  test('a changed route takes effect for new requests; the request in flight keeps its route', async () => {
    assert.deepEqual(await twice('/new/a'), [2, false], 'no route for /new/** yet: forwarded twice');
    assert.deepEqual(await twice('/pay/a'), [1, true], '/pay/** deduplicated');

    const inflightKey = randomUUID();
    const inflight = post('/pay/slow?delay=2000', inflightKey);
    let settled = false;
    void inflight.then(() => { settled = true; });
    await waitFor('slow call reached the upstream', () => upstream.received.some((r) => r.url === '/pay/slow?delay=2000'), 3000);

    dir.write('proxy.yaml', SECOND);
    const from = proxy.lines.length;
    const line = await hup((m) => m.startsWith('configuration reloaded'));
    assert.deepEqual(line.routes, ['pay', 'fresh']);
    assert.equal(settled, false, 'reloaded while the slow request was in flight');
    const restart = await waitForLine(proxy.lines, (l) => /only take effect on restart/.test(String(l.msg)), 2000, from);
    assert.deepEqual(restart.fields, ['upstream.timeout']);

    assert.deepEqual(await twice('/new/b'), [1, true], '/new/** now deduplicated');
    assert.deepEqual(await twice('/pay/b'), [2, false], '/pay/** now passthrough');

    const done = await inflight;
    assert.equal(done.status, 201);
    const [row] = await sql<{ state: string; route: string }>(db.url, 'SELECT state, route FROM idempotency_keys WHERE idem_key = $1', [inflightKey]);
    assert.deepEqual(row, { state: 'complete', route: 'pay' }, 'the in-flight request kept its route and committed');
  });

  test('an invalid file is rejected with every error logged; the running configuration stays', async () => {
    dir.write('proxy.yaml', `${SECOND}\nlissten: 1.2.3.4:80\n`.replace('mode: passthrough', 'mode: sometimes'));
    const line = await hup((m) => m.startsWith('configuration reload rejected'));
    assert.equal(line.level, 'error');
    const errors = line.errors as string[];
    assert.ok(errors.some((e) => /^lissten: unknown field/.test(e)), errors.join('\n'));
    assert.ok(errors.some((e) => /^routes\[0\]\.mode/.test(e)), errors.join('\n'));
    assert.match(String(line.msg), /lissten: unknown field/);
    assert.deepEqual(await twice('/new/c'), [1, true], 'the previous configuration still applies');

    dir.remove();
    const missing = await hup((m) => m.startsWith('configuration reload rejected'));
    assert.match((missing.errors as string[])[0]!, /cannot read config file .*proxy\.yaml: ENOENT/);
    assert.deepEqual(await twice('/new/d'), [1, true]);
  });
});

describe('SIGTERM', () => {
  test('the request in flight gets its full response and is committed; new connections are refused; exit 0', async () => {
    const key = randomUUID();
    const port = Number(new URL(proxy.url).port);
    const inflight = post('/new/slow?delay=1000', key);
    await waitFor('slow call reached the upstream', () => upstream.received.some((r) => r.url === '/new/slow?delay=1000'), 3000);
    const exited = once(proxy.proc, 'exit');
    const from = proxy.lines.length;
    proxy.proc.kill('SIGTERM');
    await waitForLine(proxy.lines, (l) => /^shutting down/.test(String(l.msg)), 3000, from);

    const refused = await new Promise<string>((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => { s.destroy(); resolve('connected'); });
      s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
    });
    assert.equal(refused, 'ECONNREFUSED', 'no new connections once shutting down');

    const res = await inflight;
    const answered = Date.now();
    assert.equal(res.status, 201);
    const body = res.json() as { execution: number; filler: string };
    assert.equal(body.filler.length, 20_000, 'the whole body arrived');
    const [code] = await exited;
    assert.equal(code, 0);
    assert.ok(Date.now() - answered < 5000, 'exits promptly once drained (keep-alive connections do not hold it to the 20s deadline)');
    const [row] = await sql<{ state: string; status_code: number }>(db.url, 'SELECT state, status_code FROM idempotency_keys WHERE idem_key = $1', [key]);
    assert.deepEqual(row, { state: 'complete', status_code: 201 });
    assert.ok(proxy.lines.some((l) => l.includes('"in-flight requests finished"')));
    assert.ok(proxy.lines.some((l) => l.includes('"shutdown complete"')));
  });
});
