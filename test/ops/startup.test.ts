// The real CLI process at start-up, the way a container runs it: SIGTERM
// during start-up ends it even as PID 1 of a PID namespace; a run-time
// start-up failure exits 1 without a usage hint; an embedded data directory
// that cannot be written says where, why and what to do; `healthcheck` probes
// the admin address the configuration names (docs/operations.md, Docker).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdirSync, readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { MAIN, startTestProxy } from '../helpers/proxy.js';
import { closedPort, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import type { RunningProxy } from '../../src/app.js';
import { tempDir, type TempDir } from '../helpers/tmp.js';
import { waitFor } from '../helpers/wait.js';
import { cliInProcess } from './support.js';

const asRoot = process.getuid?.() === 0;

/** `unshare` must be able to make the namespaces these tests need. */
function requireUnshare(args: string[]): void {
  const r = spawnSync('unshare', [...args, 'true'], { encoding: 'utf8' });
  assert.equal(r.status, 0, `these tests need util-linux's unshare ${args.join(' ')} (run as root, or enable user namespaces): ${r.error?.message ?? r.stderr}`);
}

async function exitOf(proc: ChildProcess, withinMs: number): Promise<{ code: number | null; signal: string | null } | 'still running'> {
  if (proc.exitCode !== null || proc.signalCode !== null) return { code: proc.exitCode, signal: proc.signalCode };
  const timer = new Promise<'still running'>((r) => setTimeout(() => r('still running'), withinMs).unref());
  const exited = once(proc, 'exit').then(([code, signal]) => ({ code: code as number | null, signal: signal as string | null }));
  return Promise.race([exited, timer]);
}

function collect(proc: ChildProcess): { out: () => string } {
  let text = '';
  proc.stdout?.on('data', (d: Buffer) => { text += d.toString(); });
  proc.stderr?.on('data', (d: Buffer) => { text += d.toString(); });
  return { out: () => text };
}

describe('SIGTERM during start-up', () => {
  let silent: net.Server;
  const held: net.Socket[] = [];
  let connected = 0;
  before(async () => {
    requireUnshare(['--pid', '--fork']);
    // A "PostgreSQL" that accepts and never answers: start-up waits on it.
    silent = net.createServer((s) => { connected++; held.push(s); });
    silent.listen(0, '127.0.0.1');
    await once(silent, 'listening');
  });
  after(() => {
    for (const s of held) s.destroy();
    silent?.close();
  });

  test('ends the proxy at once (exit 143) when node is PID 1 of its PID namespace, as in a container', async () => {
    const port = (silent.address() as net.AddressInfo).port;
    const proc = spawn('unshare', ['--pid', '--fork', process.execPath, MAIN, 'serve', '--upstream', 'http://127.0.0.1:1',
      '--listen', '127.0.0.1:0', '--admin', 'off', '--database-url', `postgres://postgres@127.0.0.1:${port}/x`], { stdio: ['ignore', 'pipe', 'pipe'] });
    const output = collect(proc);
    try {
      await waitFor('the proxy to connect to the silent PostgreSQL', () => connected > 0, 15_000);
      const children = readFileSync(`/proc/${proc.pid}/task/${proc.pid}/children`, 'utf8').trim().split(/\s+/).map(Number);
      assert.equal(children.length, 1, `unshare has one child (node): ${children.join(' ')}`);
      const inner = readFileSync(`/proc/${children[0]}/status`, 'utf8');
      assert.match(inner, /^NSpid:\s+\d+\s+1$/m, 'node is PID 1 in its namespace');
      process.kill(children[0]!, 'SIGTERM');
      const result = await exitOf(proc, 3000);
      assert.deepEqual(result, { code: 143, signal: null }, `SIGTERM during start-up: ${JSON.stringify(result)}\n${output.out()}`);
    } finally {
      proc.kill('SIGKILL');
    }
  });
});

describe('start-up failures at run time', () => {
  let dir: TempDir;
  before(() => { dir = tempDir(); });
  after(() => dir?.remove());

  test('PostgreSQL unreachable: exit 1, the reason, no usage hint', async () => {
    const refused = await closedPort();
    const r = await cliInProcess(['serve', '--upstream', 'http://127.0.0.1:1', '--listen', '127.0.0.1:0', '--admin', 'off',
      '--database-url', `postgres://postgres@127.0.0.1:${refused}/x`, '--log-level', 'silent']);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /ECONNREFUSED/);
    assert.doesNotMatch(r.stderr, /--help/);
  });

  test('a usage error still exits 2 with the hint', async () => {
    const r = await cliInProcess(['serve', '--frobnicate']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--help/);
  });

  const serveEmbedded = (extra: { uid?: number; gid?: number } = {}) => (cwd: string): ChildProcess =>
    spawn(process.execPath, [MAIN, 'serve', '--upstream', 'http://127.0.0.1:1', '--listen', '127.0.0.1:0', '--admin', 'off'],
      { cwd, env: { PATH: process.env.PATH }, stdio: ['ignore', 'pipe', 'pipe'], ...extra });

  const failsWith = async (proc: ChildProcess, patterns: RegExp[]): Promise<void> => {
    const output = collect(proc);
    const result = await exitOf(proc, 20_000);
    proc.kill('SIGKILL');
    assert.deepEqual(result, { code: 1, signal: null }, output.out());
    for (const p of patterns) assert.match(output.out(), p);
    assert.doesNotMatch(output.out(), /--help/);
  };

  test('embedded data directory not writable for the user: names the directory, EACCES, and the ways out', async () => {
    const cwd = path.join(dir.dir, 'app');
    mkdirSync(cwd, { recursive: true });
    chmodSync(dir.dir, 0o755); // mkdtemp's 0700 would hide `app` itself
    // As root, write permission bits do not stop us: run as nobody instead.
    const proc = asRoot ? serveEmbedded({ uid: 65534, gid: 65534 })(cwd) : (chmodSync(cwd, 0o555), serveEmbedded()(cwd));
    await failsWith(proc, [
      new RegExp(`data directory ${cwd}/\\.idempotency-proxy/data cannot be created or written: EACCES \\(permission denied\\) at ${cwd}`),
      /DATABASE_URL/, /--tmpfs \/app\/\.idempotency-proxy:uid=1000,gid=1000/,
    ]);
  });

  test('embedded data directory on a read-only file system: EROFS, not ENOENT', async () => {
    requireUnshare(['--mount', '--map-root-user']);
    const ro = path.join(dir.dir, 'ro');
    mkdirSync(ro, { recursive: true });
    const proc = spawn('unshare', ['--mount', '--map-root-user', 'sh', '-c', 'mount -t tmpfs -o ro none "$1" && cd "$1" && exec "$2" "$3" serve --upstream http://127.0.0.1:1 --listen 127.0.0.1:0 --admin off',
      'sh', ro, process.execPath, MAIN], { env: { PATH: process.env.PATH }, stdio: ['ignore', 'pipe', 'pipe'] });
    await failsWith(proc, [new RegExp(`data directory ${ro}/\\.idempotency-proxy/data cannot be created or written: EROFS \\(read-only file system\\)`), /store\.dataDir/]);
  });
});

describe('healthcheck', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let dir: TempDir;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream();
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url });
    dir = tempDir();
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
    dir?.remove();
  });
  const hostPort = (url: string): string => new URL(url).host;

  test('probes the admin address of the file, or of --admin, and fails when nothing answers there', async () => {
    const admin = hostPort(proxy.adminUrl!);
    const file = dir.write('moved.yaml', `upstream: { url: "http://127.0.0.1:1" }\nadmin: ${admin}\n`);
    const ok = await cliInProcess(['healthcheck', '--config', file]);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal((await cliInProcess(['healthcheck', '--admin', admin])).code, 0);
    const refused = await closedPort();
    const bad = await cliInProcess(['healthcheck', '--config', file, '--admin', `127.0.0.1:${refused}`]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, new RegExp(`unhealthy: http://127\\.0\\.0\\.1:${refused}/healthz: ECONNREFUSED`));
  });

  test('admin listener off: the client listener must accept connections', async () => {
    const file = dir.write('off.yaml', `routes: []\nadmin: off\nlisten: ${hostPort(proxy.url)}\n`);
    const ok = await cliInProcess(['healthcheck', '--config', file]);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /admin listener off/);
    const bad = await cliInProcess(['healthcheck', '--config', file, '--listen', `127.0.0.1:${await closedPort()}`]);
    assert.equal(bad.code, 1);
  });

  test('a configuration that does not load is unhealthy (1), not Docker\'s reserved 2', async () => {
    const r = await cliInProcess(['healthcheck', '--config', path.join(dir.dir, 'missing.yaml')]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /ENOENT/);
  });
});
