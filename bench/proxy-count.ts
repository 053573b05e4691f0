// The whole proxy counted under callgrind: one proxy under valgrind replaying
// records of two kinds in alternating windows — records that a traced proxy
// stored (their trace context kept) and records that an untraced one stored
// — for differences of a per cent or two that the pairs' scatter (±3 % a run)
// cannot settle (docs/tracing-cost.md, How to measure). Not a row of the
// benchmark and no target of its own; valgrind counts instructions (and,
// with --cache-sim, simulated cache misses), not time.
//
//   node dist/bench/proxy-count.js [--traced] [--new-keys] [--cache-sim | --gc | --alloc] [--keys 1000]
//     [--warm 40] [--window 6000] [--rounds 2] [--out DIR]
//     [--database-url postgres://postgres@127.0.0.1:5432/postgres]
//     → per window: the requests sent (replays, or new keys) and each event a request
//
// --traced: the counted proxy traces (every request sampled, spans to the
// upstream, which answers as a collector); without it, tracing is off.
// Before each window the same records are replayed --warm times over, so
// the JIT has settled; the first round's windows still carry compilation
// (read the last round). Threads are counted apart (--separate-threads):
// the main thread's count leaves out V8's background compiler and
// collector, whose share moves by several K instructions a replay from
// window to window. The dumps stay in --out (callgrind.out.<pid>.<n>-<thread>,
// one set a window, in the order printed) for callgrind_annotate; JIT code
// is named from /tmp/perf-<pid>.map (the proxy runs with --perf-basic-prof).
// Its database (idem_count_<pid>: two runs at once each have their own) is made fresh on the server and dropped
// after.
//
// --gc: the same windows with the proxy run natively (no valgrind) and V8's
// --trace-gc-nvp: per window, a replay's young-generation collections —
// bytes allocated, bytes surviving a scavenge, bytes promoted, scavenges and
// their pause — read from the lines the proxy logged during the window.
// Times, unlike instructions, move with the machine: compare windows of one
// run, and runs alternated.
//
// --alloc: the same windows with the proxy run natively and V8's sampling
// heap profiler on during each (lib/alloc-sampler.ts, freed objects kept):
// per window, the bytes a replay allocated and the functions that allocated
// most. Unlike --gc's byte counts, which come from whole scavenges around
// the window, these are the window's own, by function.
//
// --new-keys: new keys instead of replays, in every mode: before each window
// --window new keys warm the proxy, then the window sends --window others
// (each key once, none stored before; it refuses --keys and --warm). No
// records are stored first, and a round has one window. For where a new
// key's traced cost goes beyond tracing's own code (bench/trace-loop.ts
// counts that): run it with and without --traced and compare the rounds.
// A new key under callgrind costs some 400 K instructions: --window 2000
// and --rounds 4 take about five minutes a proxy (read round 4).
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, existsSync, fstatSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, readSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { NODE_FLAGS } from '../src/node-flags.js';
import { Children, type ServerHandle } from './lib/children.js';
import { REQUEST_BODY } from './lib/context.js';
import { dropDatabase, recreateDatabase } from './lib/pg.js';
import { detectPinning } from './lib/pin.js';
import { cpuNsBetween, readCpuNs } from './lib/proc.js';
import { LOAD_CPU, proxyReady, SERVER_CPU, upstreamReady } from './lib/servers.js';
import { tracedEnv } from './lib/servers-up.js';

const { values: args } = parseArgs({
  options: {
    traced: { type: 'boolean', default: false },
    'cache-sim': { type: 'boolean', default: false },
    gc: { type: 'boolean', default: false },
    alloc: { type: 'boolean', default: false },
    'new-keys': { type: 'boolean', default: false },
    // Their defaults are count()'s (below): --new-keys refuses --keys and --warm, so it must see whether they were given.
    keys: { type: 'string' },
    warm: { type: 'string' },
    window: { type: 'string' },
    rounds: { type: 'string' },
    out: { type: 'string' },
    'database-url': { type: 'string', default: 'postgres://postgres@127.0.0.1:5432/postgres' },
  },
});

/** The option `name` as a whole number above 0; `otherwise`, its default, when it was not given. */
function count(name: 'keys' | 'warm' | 'window' | 'rounds', otherwise: number): number {
  const n = args[name] === undefined ? otherwise : Number(args[name]);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} ${args[name]}: a whole number above 0`);
  return n;
}
const KEYS = count('keys', 1000);
const WARM = count('warm', 40);
const WINDOW = count('window', 6000);
const ROUNDS = count('rounds', 2);
const CONNECTIONS = 25;
// Of this run alone: with one name for every run, a second run started during a first dropped the first's
// database under it (DROP … WITH (FORCE)), or failed creating its own.
const DATABASE = `idem_count_${process.pid}`;
const SETS = ['untraced', 'traced'] as const;
type RecordSet = (typeof SETS)[number];
const NEW_KEYS = args['new-keys'];
if (NEW_KEYS && (args.keys !== undefined || args.warm !== undefined)) {
  throw new Error('--new-keys sends --window new keys to warm the proxy and --window others counted: it takes neither --keys nor --warm');
}

if (args.gc && args['cache-sim']) throw new Error('--gc runs the proxy natively: it cannot take --cache-sim');
if (args.alloc && (args.gc || args['cache-sim'])) throw new Error('--alloc runs the proxy natively with a profiler of its own: it cannot take --gc or --cache-sim');
const native = args.gc || args.alloc;
for (const tool of native ? [] : ['valgrind', 'callgrind_control']) {
  if (spawnSync(tool, ['--version'], { stdio: 'ignore' }).error !== undefined) {
    throw new Error(`${tool} is not on PATH: install valgrind (Debian: apt-get install -y valgrind)`);
  }
}

const distRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const projectRoot = resolve(distRoot, '..');
const main = join(distRoot, 'src', 'main.js');
const config = join(projectRoot, 'bench', 'proxy.yaml');
const tmp = mkdtempSync(join(tmpdir(), 'idem-count-'));
const out = resolve(args.out ?? join(tmp, 'callgrind'));
if (!native) mkdirSync(out, { recursive: true });
const pin = detectPinning(false);
const children = new Children(join(distRoot, 'bench', 'guard.js'));
process.on('exit', () => children.killAll());

/** The proxy, as the bench starts it, under `wrap` (valgrind's command, or nothing), with `v8` flags added. */
function startProxy(name: string, upstream: string, databaseUrl: string, traced: boolean, wrap: readonly string[], v8: readonly string[] = []): Promise<ServerHandle> {
  // IDEM_ALLOC_DIR: where lib/alloc-sampler.ts writes its profiles (--alloc; it does nothing unless loaded).
  // BENCH_STORE_TIMEOUT: under valgrind, store.timeout's 5 s is passed by PostgreSQL's answers to a proxy slowed ~50×
  // (two such proxies at once, or one beside other work, got 503s): the count is of instructions, not of time.
  const env: NodeJS.ProcessEnv = {
    ...process.env, ...(traced ? tracedEnv(upstream) : {}), BENCH_UPSTREAM_URL: upstream, IDEM_ALLOC_DIR: tmp,
    ...(wrap.length > 0 ? { BENCH_STORE_TIMEOUT: '120s' } : {}),
  };
  delete env['DATABASE_URL'];
  delete env['REDIS_URL'];
  return children.start({
    name,
    command: [...pin.prefix(SERVER_CPU), ...wrap, process.execPath, ...NODE_FLAGS, ...(wrap.length > 0 ? ['--perf-basic-prof'] : []), ...v8, main,
      'serve', '--config', config, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', '--database-url', databaseUrl],
    logFile: join(tmp, `${name}.log`),
    env,
    cwd: projectRoot,
    timeoutMs: wrap.length > 0 ? 300_000 : 60_000,
    ready: proxyReady,
  });
}

/**
 * `total` requests over `pool` (CONNECTIONS at a time), the i-th with the key `keyOf(i)`, each answered with a 2xx;
 * `replayed`: every answer must be a replay (true) or must not be (false); null: either (the records being stored).
 * One pool a proxy: a counted window holds requests on open connections, no connection set-up.
 */
async function sendKeys(pool: Pool, path: string, total: number, keyOf: (i: number) => string, replayed: boolean | null): Promise<void> {
  let next = 0;
  const one = async (): Promise<void> => {
    while (next < total) {
      const key = keyOf(next++);
      const res = await pool.request({
        method: 'POST', path, body: REQUEST_BODY,
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
      });
      await res.body.dump();
      if (res.statusCode >= 300) throw new Error(`key ${key}: status ${res.statusCode} (see ${tmp})`);
      if (replayed !== null && (res.headers['idempotent-replayed'] === 'true') !== replayed) {
        throw new Error(`key ${key}: ${replayed ? 'not a replay' : 'replayed'}`);
      }
    }
  };
  await Promise.all(Array.from({ length: CONNECTIONS }, one));
}

/** Each key of `set` sent `passes` times; with `replays`, every answer must be a replay. */
const send = (pool: Pool, set: RecordSet, passes: number, replays: boolean): Promise<void> =>
  sendKeys(pool, '/bench/replay', KEYS * passes, (i) => `count-${set}-${i % KEYS}`, replays ? true : null);

/** `n` new keys (none sent before: `prefix` is this run's and this batch's), each executed, not replayed. */
const sendNew = (pool: Pool, prefix: string, n: number): Promise<void> =>
  sendKeys(pool, '/bench/newkey', n, (i) => `${prefix}-${i}`, false);

/** Callgrind's `events:` and `totals:` lines of one dump file, the totals divided by `n`. */
function events(file: string, n: number): Map<string, number> {
  const text = readFileSync(join(out, file), 'utf8');
  const names = /^events: (.+)$/m.exec(text)?.[1]?.split(' ') ?? [];
  const totals = /^totals: (.+)$/m.exec(text)?.[1]?.split(' ').map(Number) ?? [];
  return new Map(names.map((e, i) => [e, (totals[i] ?? 0) / n]));
}

/**
 * The newest dump's events a request (of `n`): the main thread's (its file ends in -01: valgrind numbers threads from 1), and
 * every thread's (V8's background compiler and collector among them, whose share moves from window to window).
 */
function newestDump(pid: number, n: number): { main: Map<string, number>; all: Map<string, number> } {
  const dumps = readdirSync(out).filter((f) => f.startsWith(`callgrind.out.${pid}.`));
  const number = (f: string): number => Number(f.slice(`callgrind.out.${pid}.`.length).split('-')[0]);
  const last = Math.max(...dumps.map(number));
  const files = dumps.filter((f) => number(f) === last);
  const mainThread = files.find((f) => f.endsWith('-01'));
  if (mainThread === undefined) throw new Error(`no callgrind dump of the main thread in ${out}`);
  const all = new Map<string, number>();
  for (const f of files) for (const [e, v] of events(f, n)) all.set(e, (all.get(e) ?? 0) + v);
  return { main: events(mainThread, n), all };
}

/** The byte counts a scavenge's --trace-gc-nvp line carries. */
const BYTE_FIELDS = ['allocated', 'new_space_survived', 'promoted'] as const;
type GcLine = { readonly gc: string; readonly pause: number } & { readonly [F in (typeof BYTE_FIELDS)[number]]?: number };
const NVP_FIELD = /(\S+)=(\S+)/g;

/**
 * One collection's --trace-gc-nvp line, or null for any other line (or one cut short). V8 up to Node 24's writes
 * name=value pairs (`pause=1.3 ... gc=s ... allocated=5048528`); Node 26's V8 writes the same names as one JSON
 * object after `GC: `.
 */
function gcLine(line: string): GcLine | null {
  const json = line.indexOf('GC: {');
  if (json >= 0) {
    let o: Record<string, unknown>;
    try {
      o = JSON.parse(line.slice(json + 4)) as Record<string, unknown>;
    } catch {
      return null; // cut off where the window's text ends
    }
    return typeof o.gc === 'string' && typeof o.pause === 'number' ? (o as GcLine) : null;
  }
  if (!/ gc=\S/.test(line)) return null;
  const o: Record<string, string | number> = {};
  for (const [, k, v] of line.matchAll(NVP_FIELD)) o[k!] = k === 'gc' ? v! : Number(v);
  return o as GcLine;
}

/**
 * What --trace-gc-nvp logged in `text` (the proxy's log between two readings of its length), a request (of `n`): each
 * collection's line carries its kind (gc=s: a scavenge), its pause in ms and, for a scavenge, its bytes (a full
 * collection's byte counts are of the whole heap: only its pause and its number are taken).
 */
function collections(text: string, n: number): string {
  let scavenges = 0;
  let full = 0;
  let pauseMs = 0;
  const bytes = { allocated: 0, new_space_survived: 0, promoted: 0 };
  for (const line of text.split('\n')) {
    const gc = gcLine(line);
    if (gc === null) continue;
    pauseMs += gc.pause;
    if (gc.gc !== 's') {
      full += 1;
      continue;
    }
    scavenges += 1;
    for (const field of BYTE_FIELDS) bytes[field] += gc[field] ?? 0;
  }
  return `allocated ${(bytes.allocated / n).toFixed(0)} B, survived a scavenge ${(bytes.new_space_survived / n).toFixed(0)} B, `
    + `promoted ${(bytes.promoted / n).toFixed(1)} B, scavenges ${((scavenges * 1000) / n).toFixed(2)} a thousand`
    + `${full > 0 ? ` (and ${full} full collections in the window)` : ''}, paused ${((pauseMs * 1000) / n).toFixed(2)} µs`;
}

/** A file's text from byte `offset` to its end. */
function readFrom(file: string, offset: number): string {
  const fd = openSync(file, 'r');
  try {
    const b = Buffer.alloc(fstatSync(fd).size - offset);
    readSync(fd, b, 0, b.length, offset);
    return b.toString('utf8');
  } finally {
    closeSync(fd);
  }
}

interface ProfileNode {
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  readonly selfSize: number;
  readonly children: readonly ProfileNode[];
}

/** The n-th profile lib/alloc-sampler.ts wrote for the proxy `pid`, once it is there (it is named when whole). */
async function profileWritten(pid: number, n: number): Promise<string> {
  const file = join(tmp, `alloc-${pid}-${n}.json`);
  for (let waited = 0; waited < 30_000; waited += 50) {
    if (existsSync(file)) return file;
    await sleep(50);
  }
  throw new Error(`the proxy wrote no allocation profile ${file} within 30 s (its log: ${join(tmp, 'counted.log')})`);
}

/**
 * A window's allocations a request (of `n`), from V8's sampling heap profile: the bytes in all (each node's selfSize, V8's
 * estimate from its samples) and the functions that allocated most, by name, file and line.
 */
function allocations(file: string, n: number): string {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as { head?: ProfileNode; error?: string };
  if (profile.head === undefined) throw new Error(`${file}: no profile (${profile.error ?? 'no head'})`);
  const byFunction = new Map<string, number>();
  let total = 0;
  const walk = (node: ProfileNode): void => {
    const f = node.callFrame;
    const name = `${f.functionName === '' ? '(anonymous)' : f.functionName} ${f.url === '' ? '' : `${f.url.slice(f.url.lastIndexOf('/') + 1)}:${f.lineNumber + 1}`}`.trim();
    byFunction.set(name, (byFunction.get(name) ?? 0) + node.selfSize);
    total += node.selfSize;
    for (const child of node.children) walk(child);
  };
  walk(profile.head);
  const most = [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, 10);
  return `allocated ${(total / n).toFixed(0)} B; most by ${most.map(([name, bytes]) => `${name} ${(bytes / n).toFixed(0)} B`).join(', ')}`;
}

const shown = (m: Map<string, number>): string => [...m].map(([e, v]) => `${e} ${v >= 1000 ? `${(v / 1000).toFixed(1)} K` : v.toFixed(1)}`).join(', ');

const adminUrl = args['database-url'];
const databaseUrl = await recreateDatabase(adminUrl, DATABASE);
try {
  const upstream = await children.start({
    name: 'upstream',
    command: [...pin.prefix(LOAD_CPU), process.execPath, join(distRoot, 'bench', 'upstream.js'), '--port', '0'],
    logFile: join(tmp, 'upstream.log'), env: process.env, cwd: projectRoot, timeoutMs: 15_000, ready: upstreamReady,
  });
  // The records: one set stored by a traced proxy (each keeps its execution's trace context), one by an untraced one.
  for (const set of NEW_KEYS ? [] : SETS) {
    const recorder = await startProxy(`record-${set}`, upstream.url, databaseUrl, set === 'traced', []);
    const pool = new Pool(recorder.url, { connections: CONNECTIONS });
    await send(pool, set, 1, false);
    await pool.close();
    await recorder.stop();
  }
  const vg = ['valgrind', '--tool=callgrind', '--instr-atstart=no', '--smc-check=all-non-file', '--separate-threads=yes',
    `--callgrind-out-file=${join(out, 'callgrind.out.%p')}`,
    ...(args['cache-sim'] ? ['--cache-sim=yes', '--branch-sim=yes'] : [])];
  // How the counted proxy runs, per mode: under valgrind (the default), or natively with V8's collection log
  // (--gc) or the allocation sampler loaded (--alloc); and what the first line says of it.
  const [wrap, v8, how] = args.gc
    ? [[], ['--trace-gc-nvp'], '--trace-gc-nvp); logs']
    : args.alloc
      ? [[], ['--import', pathToFileURL(join(distRoot, 'bench', 'lib', 'alloc-sampler.js')).href], 'allocations sampled in each window); profiles and logs']
      : [vg, [], `under callgrind); dumps in ${out}; logs`];
  const proxy = await startProxy('counted', upstream.url, databaseUrl, args.traced, wrap, v8);
  const pid = String(proxy.pid);
  const pool = new Pool(proxy.url, { connections: CONNECTIONS });
  const windowPasses = Math.ceil(WINDOW / KEYS);
  console.log(`proxy (pid ${pid}, tracing ${args.traced ? 'on' : 'off'}, ${how} in ${tmp}`);
  let profiles = 0;
  // A window: its name in the lines printed, what warms the proxy before it, what it sends, and how many requests.
  interface Window { readonly name: string; readonly each: string; warm(): Promise<void>; send(): Promise<void>; readonly n: number }
  const windows = (round: number): Window[] => NEW_KEYS
    ? [{
      name: 'new keys', each: 'a new key', n: WINDOW,
      warm: () => sendNew(pool, `count-new-${pid}-${round}-warm`, WINDOW),
      send: () => sendNew(pool, `count-new-${pid}-${round}`, WINDOW),
    }]
    : SETS.map((set) => ({
      name: `records stored ${set}`, each: 'a replay', n: windowPasses * KEYS,
      warm: () => send(pool, set, WARM, true),
      send: () => send(pool, set, windowPasses, true),
    }));
  for (let round = 1; round <= ROUNDS; round++) {
    for (const w of windows(round)) {
      await w.warm();
      if (args.gc) {
        const before = statSync(proxy.logFile).size;
        const cpuBefore = readCpuNs(proxy.pid);
        await w.send();
        const cpuNs = cpuNsBetween(cpuBefore, readCpuNs(proxy.pid));
        const text = readFrom(proxy.logFile, before);
        const cpu = cpuNs === null ? 'CPU not read (a thread came or went)' : `CPU ${(cpuNs / 1000 / w.n).toFixed(1)} µs`;
        console.log(`round ${round}, ${w.name}: ${w.each}, ${cpu}, ${collections(text, w.n)}`);
        continue;
      }
      if (args.alloc) {
        process.kill(proxy.pid, 'SIGUSR2');
        await sleep(200); // the proxy's handler runs on its next turn: sampling is on before the window's first request
        await w.send();
        process.kill(proxy.pid, 'SIGUSR2');
        const file = await profileWritten(proxy.pid, ++profiles);
        console.log(`round ${round}, ${w.name}: ${w.each}, ${allocations(file, w.n)}`);
        continue;
      }
      execFileSync('callgrind_control', ['-i', 'on', pid], { stdio: 'ignore' });
      await w.send();
      execFileSync('callgrind_control', ['-i', 'off', pid], { stdio: 'ignore' });
      execFileSync('callgrind_control', ['-d', pid], { stdio: 'ignore' });
      const { main: mainThread, all } = newestDump(proxy.pid, w.n);
      console.log(`round ${round}, ${w.name}: ${w.each}, main thread ${shown(mainThread)}; all threads ${shown(all)}`);
    }
  }
  await pool.close();
} finally {
  await children.stopAll();
  await dropDatabase(adminUrl, DATABASE);
}
