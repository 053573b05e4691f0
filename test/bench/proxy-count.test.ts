// bench/proxy-count.ts, run as a process against the machine's PostgreSQL.
// --alloc: real proxies record keys, a third replays them with V8's
// sampling heap profiler on (bench/lib/alloc-sampler.ts, loaded into the
// proxy), and the tool prints what each window allocated, a replay.
// --new-keys: the counted proxy is sent keys no one sent before.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import pg from 'pg';
import { join } from 'node:path';
import { ADMIN_URL, requirePostgres } from '../helpers/db.js';
import { repoRoot } from '../helpers/repo.js';

const root = repoRoot();

describe('bench/proxy-count.ts', () => {
  test("each window's allocations a replay: what the window allocated, objects already collected included", async () => {
    await requirePostgres();
    const r = spawnSync(process.execPath, [
      join(root, 'dist', 'bench', 'proxy-count.js'), '--alloc', '--traced', '--keys', '50', '--warm', '2', '--window', '2000', '--rounds', '1',
      '--database-url', ADMIN_URL,
    ], { cwd: root, encoding: 'utf8', timeout: 180_000 });
    assert.equal(r.status, 0, `proxy-count failed:\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /tracing on, allocations sampled in each window/);
    const windows = [...r.stdout.matchAll(/^round 1, records stored (untraced|traced): a replay, allocated (\d+) B; most by (.+)$/gm)];
    assert.deepEqual(windows.map((m) => m[1]), ['untraced', 'traced'], r.stdout);
    for (const [, set, bytes, most] of windows) {
      // A replay allocates some 20 KB (docs/tracing-cost.md). A profile of what is still alive when the window ends
      // — node's --heap-prof, or the sampler without the objects the collector freed — reads a few hundred bytes.
      assert.ok(Number(bytes) > 5_000, `${set}: ${bytes} B a replay is what outlived the window, not what it allocated`);
      // Ten functions, each named with its file and line where it has one, and bytes of its own.
      const named = most!.split(', ');
      assert.equal(named.length, 10, most);
      for (const f of named) assert.match(f, /^\S.* \d+ B$/);
      assert.ok(named.some((f) => /\.js:\d+ \d+ B$/.test(f)), most);
    }
  });

  test('--new-keys: each window sends keys never sent before, each executed once, and is read a new key', async () => {
    await requirePostgres();
    const r = spawnSync(process.execPath, [
      join(root, 'dist', 'bench', 'proxy-count.js'), '--new-keys', '--gc', '--window', '300', '--rounds', '2', '--database-url', ADMIN_URL,
    ], { cwd: root, encoding: 'utf8', timeout: 180_000 });
    assert.equal(r.status, 0, `proxy-count failed:\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /tracing off, --trace-gc-nvp/);
    // One window a round, no records stored first: a replayed answer would have stopped the tool (sendNew).
    const windows = [...r.stdout.matchAll(/^round (\d), (.+?): a new key, CPU ([\d.]+) µs, allocated (\d+) B/gm)];
    assert.deepEqual(windows.map((m) => [m[1], m[2]]), [['1', 'new keys'], ['2', 'new keys']], r.stdout);
    // A new key allocates more than a replay's some 20 KB (it forwards the request and stores the record).
    for (const m of windows) assert.ok(Number(m[4]) > 20_000 && Number(m[3]) > 0, m[0]);
    assert.doesNotMatch(r.stdout, /records stored/);
  });

  test('two runs started at the same moment each count in a database of their own, and leave none behind', async () => {
    await requirePostgres();
    const run = (): Promise<{ pid: number; code: number | null; out: string }> => new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [
        join(root, 'dist', 'bench', 'proxy-count.js'), '--new-keys', '--gc', '--window', '200', '--rounds', '1', '--database-url', ADMIN_URL,
      ], { cwd: root, timeout: 180_000 });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d));
      child.stderr.on('data', (d: Buffer) => (out += d));
      child.on('error', reject);
      child.on('close', (code) => resolve({ pid: child.pid!, code, out }));
    });
    const runs = await Promise.all([run(), run()]);
    for (const r of runs) {
      assert.equal(r.code, 0, `proxy-count (pid ${r.pid}) failed:\n${r.out}`);
      assert.match(r.out, /^round 1, new keys: a new key, CPU [\d.]+ µs/m);
    }
    const admin = new pg.Client({ connectionString: ADMIN_URL });
    await admin.connect();
    try {
      const left = await admin.query<{ datname: string }>('SELECT datname FROM pg_database WHERE datname = ANY($1)', [runs.map((r) => `idem_count_${r.pid}`)]);
      assert.deepEqual(left.rows, []);
    } finally {
      await admin.end();
    }
  });

  test('--new-keys takes neither --keys nor --warm', () => {
    for (const other of [['--keys', '50'], ['--warm', '2']]) {
      const r = spawnSync(process.execPath, [join(root, 'dist', 'bench', 'proxy-count.js'), '--new-keys', ...other], { cwd: root, encoding: 'utf8', timeout: 30_000 });
      assert.notEqual(r.status, 0);
      assert.match(r.stderr, /--new-keys sends --window new keys to warm the proxy and --window others counted: it takes neither --keys nor --warm/);
    }
  });

  test('--alloc takes neither --gc nor --cache-sim', () => {
    for (const other of ['--gc', '--cache-sim']) {
      const r = spawnSync(process.execPath, [join(root, 'dist', 'bench', 'proxy-count.js'), '--alloc', other], { cwd: root, encoding: 'utf8', timeout: 30_000 });
      assert.notEqual(r.status, 0);
      assert.match(r.stderr, /--alloc runs the proxy natively with a profiler of its own: it cannot take --gc or --cache-sim/);
    }
  });
});
