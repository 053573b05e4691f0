// The product's Docker image, run: `npm run test:container` (test/container/run.sh
// builds it, then runs this file; not part of `npm test`). Every container
// uses the host network (the daemon of run.sh has no bridge) and talks to the
// PostgreSQL and the upstreams the test starts on 127.0.0.1. The settings the
// docs give (docs/operations.md, Docker; Sizing) are the ones used here.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmodSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { closedPort, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { tempDir, type TempDir } from '../helpers/tmp.js';
import { waitFor } from '../helpers/wait.js';
import { repoRoot } from '../ops/support.js';

const DOCKER = process.env.DOCKER ?? 'docker';
const IMAGE = process.env.IMAGE ?? 'idempotency-proxy:test';
const root = repoRoot();
const started: string[] = [];
let dirs: TempDir[] = [];

type Result = { code: number; stdout: string; stderr: string };
function docker(args: string[], timeoutMs = 120_000): Promise<Result> {
  return new Promise((resolve) => {
    execFile(DOCKER, args, { timeout: timeoutMs, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1;
      resolve({ code, stdout: stdout.toString(), stderr: stderr.toString() });
    });
  });
}
async function ok(args: string[]): Promise<string> {
  const r = await docker(args);
  assert.equal(r.code, 0, `docker ${args.join(' ')}: ${r.stderr}`);
  return r.stdout.trim();
}

let seq = 0;
/** `docker run -d --network host` with a name of its own; removed in after(). */
async function run(opts: string[], cmd: string[] = []): Promise<string> {
  const name = `idp-check-${process.pid}-${++seq}`;
  started.push(name);
  await ok(['run', '-d', '--network', 'host', '--name', name, ...opts, IMAGE, ...cmd]);
  return name;
}
const logs = async (name: string): Promise<string> => { const r = await docker(['logs', name]); return r.stdout + r.stderr; };
const state = async (name: string): Promise<{ Status: string; ExitCode: number; OOMKilled: boolean; Health?: { Status: string } }> =>
  JSON.parse(await ok(['inspect', '-f', '{{json .State}}', name]));
async function exitCode(name: string, withinMs: number): Promise<number> {
  const r = await docker(['wait', name], withinMs);
  assert.equal(r.code, 0, `${name} still running after ${withinMs} ms\n${await logs(name)}`);
  return Number(r.stdout.trim());
}

async function freePort(): Promise<number> {
  const s = net.createServer().listen(0, '127.0.0.1');
  await new Promise((r) => s.once('listening', r));
  const { port } = s.address() as net.AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}
async function portFree(port: number): Promise<boolean> {
  const s = net.createServer();
  return new Promise((resolve) => {
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** A folder with config.yaml, readable by the image's uid 1000 (mounted at /etc/idempotency-proxy, as documented). */
function confDir(yaml: string): { dir: string; file: string } {
  const d = tempDir('idp-conf-');
  dirs.push(d);
  chmodSync(d.dir, 0o755);
  const file = d.write('config.yaml', yaml);
  chmodSync(file, 0o644);
  return { dir: d.dir, file };
}
const mount = (dir: string): string[] => ['-v', `${dir}:/etc/idempotency-proxy:ro`];

async function ready(adminPort: number, name: string, ms = 60_000): Promise<void> {
  await waitFor(`${name} ready`, async () => {
    const s = await state(name);
    if (s.Status !== 'running') throw new Error(`${name} ${s.Status} (exit ${s.ExitCode}, OOMKilled ${s.OOMKilled}):\n${await logs(name)}`);
    try {
      return (await send(`http://127.0.0.1:${adminPort}/readyz`, { method: 'GET' })).status === 200;
    } catch {
      return false;
    }
  }, ms);
}

const ROUTES = `
routes:
  - name: pay
    match: { path: /pay/** }
    tenant: { constant: t }
`;

let db: TestDatabase;
let upstream: TestUpstream;
const hits = (key: string): number => upstream.received.filter((r) => r.headers['idempotency-key'] === key).length;

before(async () => {
  const v = await docker(['version', '--format', '{{.Server.Version}}']);
  assert.equal(v.code, 0, `no Docker daemon answers (run through npm run test:container): ${v.stderr}`);
  assert.equal((await docker(['image', 'inspect', IMAGE])).code, 0, `image ${IMAGE} not built`);
  db = await createTestDatabase();
  upstream = await startUpstream(async (req, n, res) => {
    const delay = Number(/delay=(\d+)/.exec(req.url)?.[1] ?? 0);
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ execution: n, url: req.url }));
  });
});
after(async () => {
  if (started.length > 0) await docker(['rm', '-f', ...started]);
  await upstream?.close();
  await db?.drop();
  for (const d of dirs) d.remove();
  dirs = [];
});

/** listen/admin on free host ports, the test's upstream, PostgreSQL unless `store` says otherwise. */
async function config(extra = '', store: string | null = `store: { postgres: "${db.url}" }`): Promise<{ yaml: string; port: number; admin: number }> {
  const port = await freePort();
  const admin = await freePort();
  const yaml = `listen: 127.0.0.1:${port}\nadmin: 127.0.0.1:${admin}\nupstream: { url: "${upstream.url}", timeout: 30s }\n${store ?? ''}\n${extra}\n${ROUTES}`;
  return { yaml, port, admin };
}

async function replays(port: number, key: string): Promise<void> {
  const headers = { 'idempotency-key': key, 'content-type': 'application/json' };
  const first = await send(`http://127.0.0.1:${port}/pay/x`, { headers, body: '{"amount":1}' });
  const second = await send(`http://127.0.0.1:${port}/pay/x`, { headers, body: '{"amount":1}' });
  assert.equal(first.status, 201);
  assert.equal(second.status, 201);
  assert.equal(second.headers['idempotent-replayed'], 'true');
  assert.equal(hits(key), 1, 'one execution');
}

describe('the image', () => {
  test('runs as uid 1000 (a number: Kubernetes can check runAsNonRoot)', async () => {
    assert.equal(await ok(['inspect', '-f', '{{.Config.User}}', IMAGE]), '1000:1000');
    assert.equal(await ok(['run', '--rm', '--network', 'host', '--entrypoint', 'id', IMAGE, '-u']), '1000');
  });

  test('PostgreSQL, with the sizing docs\' limit and a locked-down container: one execution, a replay, 409 while in flight', async () => {
    const sizing = readFileSync(path.join(root, 'docs/operations.md'), 'utf8');
    const mib = /\*\*Memory, with PostgreSQL\*\*: \d+ MiB request \/ (\d+) MiB limit/.exec(sizing)?.[1];
    assert.ok(mib, 'docs/operations.md, Sizing, gives the memory limit with PostgreSQL');
    const c = await config();
    const { dir } = confDir(c.yaml);
    const name = await run([...mount(dir), '--memory', `${mib}m`, '--read-only', '--cap-drop', 'ALL', '--security-opt', 'no-new-privileges']);
    await ready(c.admin, name);
    await replays(c.port, 'pg-1');
    const headers = { 'idempotency-key': 'pg-slow' };
    const [a, b] = await Promise.all([
      send(`http://127.0.0.1:${c.port}/pay/slow?delay=1500`, { headers, body: '{}' }),
      new Promise((r) => setTimeout(r, 300)).then(() => send(`http://127.0.0.1:${c.port}/pay/slow?delay=1500`, { headers, body: '{}' })),
    ]);
    assert.deepEqual([a.status, b.status], [201, 409]);
    assert.equal(hits('pg-slow'), 1);
    assert.equal((await state(name)).OOMKilled, false);
  });

  test('embedded store: --read-only with the documented tmpfs and memory limit; an arbitrary uid with gid 0', async () => {
    const sizing = readFileSync(path.join(root, 'docs/operations.md'), 'utf8');
    const limit = /\*\*Memory, embedded store\*\*[\s\S]*?`docker run --memory (\d+m)`/.exec(sizing)?.[1];
    assert.ok(limit, 'docs/operations.md, Sizing, gives the embedded store\'s docker run --memory');
    const c = await config('', null);
    const { dir } = confDir(c.yaml);
    const name = await run([...mount(dir), '--memory', limit, '--read-only', '--tmpfs', '/app/.idempotency-proxy:uid=1000,gid=1000']);
    await ready(c.admin, name, 90_000);
    await replays(c.port, 'embedded-1');
    const c2 = await config('', null);
    const other = await run([...mount(confDir(c2.yaml).dir), '--memory', limit, '--user', '12345:0']);
    await ready(c2.admin, other, 90_000);
    await replays(c2.port, 'embedded-uid');
  });

  test('embedded store on a read-only root without a volume: exit 1 naming the directory, EROFS and the ways out', async () => {
    const c = await config('', null);
    const name = await run([...mount(confDir(c.yaml).dir), '--read-only']);
    assert.equal(await exitCode(name, 60_000), 1);
    const out = await logs(name);
    assert.match(out, /data directory \/app\/\.idempotency-proxy\/data cannot be created or written: EROFS \(read-only file system\)/);
    assert.match(out, /--tmpfs \/app\/\.idempotency-proxy:uid=1000,gid=1000/);
    assert.doesNotMatch(out, /--help/);
  });

  test('PostgreSQL unreachable at start: exit 1 and the reason, not a usage error', async () => {
    const c = await config('', `store: { postgres: "postgres://postgres@127.0.0.1:${await closedPort()}/x" }`);
    const name = await run(mount(confDir(c.yaml).dir));
    assert.equal(await exitCode(name, 60_000), 1);
    const out = await logs(name);
    assert.match(out, /ECONNREFUSED/);
    assert.doesNotMatch(out, /--help/);
  });
});

describe('HEALTHCHECK (the image\'s own command, probed every second)', () => {
  const health = ['--health-interval', '1s', '--health-timeout', '10s', '--health-retries', '2'];
  const healthy = async (name: string): Promise<void> => {
    await waitFor(`${name} healthy`, async () => (await state(name)).Health?.Status === 'healthy', 60_000)
      .catch(async (e: Error) => { throw new Error(`${e.message}: ${JSON.stringify((await state(name)).Health)}\n${await logs(name)}`); });
  };

  test('admin listener at its default (127.0.0.1:9090), moved, and off', async () => {
    assert.ok(await portFree(9090), 'host port 9090 is taken: the default admin address cannot be checked on the host network');
    const port = await freePort();
    const atDefault = confDir(`listen: 127.0.0.1:${port}\nupstream: { url: "${upstream.url}" }\nstore: { postgres: "${db.url}" }\n${ROUTES}`);
    const moved = await config();
    const offPort = await freePort();
    const off = confDir(`listen: 127.0.0.1:${offPort}\nadmin: off\nupstream: { url: "${upstream.url}" }\nstore: { postgres: "${db.url}" }\n${ROUTES}`);
    // Moved and off first, while nothing owns the host's 9090: on the host
    // network a probe of 127.0.0.1:9090 would reach any container's admin.
    const names = [await run([...mount(confDir(moved.yaml).dir), ...health]), await run([...mount(off.dir), ...health])];
    await Promise.all(names.map(healthy));
    assert.ok(await portFree(9090), 'nothing listens on 9090 while the moved and the disabled admin are checked');
    await healthy(await run([...mount(atDefault.dir), ...health]));
  });
});

describe('docker stop', () => {
  test('during start-up: exits at once (143), no wait for the grace period', async () => {
    const held: net.Socket[] = [];
    const silent = net.createServer((s) => { held.push(s); }).listen(0, '127.0.0.1');
    await new Promise((r) => silent.once('listening', r));
    try {
      const c = await config('', `store: { postgres: "postgres://postgres@127.0.0.1:${(silent.address() as net.AddressInfo).port}/x" }`);
      const name = await run(mount(confDir(c.yaml).dir));
      await waitFor('the proxy to connect to the silent PostgreSQL', () => held.length > 0, 30_000);
      const t0 = Date.now();
      await ok(['stop', '-t', '10', name]);
      const took = Date.now() - t0;
      assert.ok(took < 3000, `docker stop took ${took} ms`);
      assert.equal((await state(name)).ExitCode, 143, await logs(name));
    } finally {
      for (const s of held) s.destroy();
      silent.close();
    }
  });

  test('with a 12 s request in flight, started as the docs say (--stop-timeout): drained, exit 0, no re-execution', async () => {
    const docs = readFileSync(path.join(root, 'docs/operations.md'), 'utf8');
    const m = /docker run [^\n]*--stop-timeout (\d+)/.exec(docs);
    assert.ok(m, 'docs/operations.md shows a docker run line with --stop-timeout');
    const c = await config('shutdownTimeout: 30s\ndefaults: { lease: 10s }');
    const { dir } = confDir(c.yaml);
    const name = await run(['--stop-timeout', m[1]!, ...mount(dir)]);
    await ready(c.admin, name);
    const headers = { 'idempotency-key': 'drain-1' };
    const inFlight = send(`http://127.0.0.1:${c.port}/pay/long?delay=12000`, { headers, body: '{}' });
    await waitFor('the request to reach the upstream', () => hits('drain-1') === 1, 10_000);
    const stopped = docker(['stop', name], 60_000);
    const reply = await inFlight;
    assert.equal(reply.status, 201, 'the request in flight got its answer');
    assert.equal((await stopped).code, 0);
    assert.equal((await state(name)).ExitCode, 0, await logs(name));
    const again = await run(['--stop-timeout', m[1]!, ...mount(dir)]);
    await ready(c.admin, again);
    const retry = await send(`http://127.0.0.1:${c.port}/pay/long?delay=12000`, { headers, body: '{}' });
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.equal(hits('drain-1'), 1, 'executed once');
  });
});

describe('configuration', () => {
  test('SIGHUP with the config folder mounted (as documented) reads a file an editor replaced', async () => {
    const c = await config();
    const { dir, file } = confDir(c.yaml);
    const name = await run(mount(dir));
    await ready(c.admin, name);
    const headers = { 'idempotency-key': 'hup-1' };
    await send(`http://127.0.0.1:${c.port}/fresh/x`, { headers, body: '{}' });
    await send(`http://127.0.0.1:${c.port}/fresh/x`, { headers, body: '{}' });
    assert.equal(hits('hup-1'), 2, 'before the reload /fresh/ is not a route: passed through');
    // Replace the file, as editors, sed -i and git checkout do: a new inode.
    writeFileSync(`${file}.new`, `${c.yaml}\n  - name: fresh\n    match: { path: /fresh/** }\n    tenant: { constant: t }\n`);
    chmodSync(`${file}.new`, 0o644);
    renameSync(`${file}.new`, file);
    await ok(['kill', '-s', 'HUP', name]);
    await waitFor('the reload', async () => /configuration reloaded: new requests use the new routes/.test(await logs(name)), 10_000)
      .catch(async (e: Error) => { throw new Error(`${e.message}\n${await logs(name)}`); });
    const key = { 'idempotency-key': 'hup-2' };
    await send(`http://127.0.0.1:${c.port}/fresh/x`, { headers: key, body: '{}' });
    const second = await send(`http://127.0.0.1:${c.port}/fresh/x`, { headers: key, body: '{}' });
    assert.equal(second.headers['idempotent-replayed'], 'true');
    assert.equal(hits('hup-2'), 1);
  });

  test('docker-compose.yml is accepted by Compose v1 (docker-compose, Debian 12)', async () => {
    const r = await new Promise<Result>((resolve) => {
      execFile('docker-compose', ['-f', path.join(root, 'docker-compose.yml'), 'config', '-q'], (err, stdout, stderr) =>
        resolve({ code: err === null ? 0 : 1, stdout, stderr }));
    });
    assert.equal(r.code, 0, r.stderr);
  });
});
