// The harness's options: `--only a,b` on the command line, the rest from the
// environment (BENCH_*). Validated once; everything else trusts them.
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ALIASES, allNames } from './scenarios.js';
import type { LoadGenerator } from './types.js';
import { chooseGenerator } from './wrk.js';

export interface RunOptions {
  readonly only: ReadonlySet<string> | null; // null: everything
  readonly durationS: number;
  readonly warmupS: number;
  readonly primeS: number; // seconds per step of the uncounted first round (0: none)
  /** BENCH_TRACE_PRIME: seconds the tracing pairs' first pair primes its two fresh proxies (0: none); a second pair on them primes primeS. */
  readonly tracePrimeS: number;
  readonly reps: number;
  readonly big: boolean; // claim latency at 10^7 rows instead of 10^6
  readonly noPin: boolean;
  readonly adminUrl: string; // PostgreSQL server, maintenance database (the run's own, once started)
  readonly redisUrl: string;
  readonly ownPostgres: boolean; // a pinned cluster of the run's own (asked for: no BENCH_PG_URL, no BENCH_SERVICES=machine; in run.ts: started)
  readonly ownRedis: boolean; // likewise for Redis (no BENCH_REDIS_URL)
  readonly dbName: string;
  readonly keepDb: boolean;
  readonly table: string | null;
  /** BENCH_PROXY_PROFILE: a folder; each proxy runs with --cpu-prof into <folder>/<its name> (profiles are written when it stops). */
  readonly proxyProfileDir: string | null;
  readonly rssSockets: number;
  readonly listOnly: boolean;
  readonly load: LoadGenerator; // BENCH_LOAD, else wrk when on PATH, else autocannon
  readonly loadNote: string | null; // why not wrk, when it fell back
  /** BENCH_OTHER: the root of another checkout, built (its dist/src/main.js, its bench/proxy.yaml): the *-other scenarios run it. */
  readonly other: string | null;
  /** BENCH_TRACE_ENV: more environment for the traced proxy of the tracing pairs (NAME=value,…), e.g. another OTEL_BSP_* setting. */
  readonly traceEnv: Readonly<Record<string, string>>;
  /** BENCH_BUILD_TRACED=1: both sides of the build pairs traced as the tracing pairs' traced side is (a change to tracing's code, judged in one run). */
  readonly buildTraced: boolean;
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

function int(env: NodeJS.ProcessEnv, name: string, dflt: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return dflt;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min || n > max) throw new Error(`${name}=${raw}: expected a number from ${min} to ${max}`);
  return n;
}

/** A switch: unset, empty or 0 is off, 1 is on; anything else is refused by name. */
function flag(env: NodeJS.ProcessEnv, name: string): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '' || raw === '0') return false;
  if (raw === '1') return true;
  throw new Error(`${name}=${raw}: expected 1 (on) or 0 (off)`);
}

function loopback(name: string, url: string): string {
  const host = new URL(url).hostname;
  if (!LOOPBACK.has(host)) throw new Error(`${name}: the benchmark only talks to 127.0.0.1, not ${host}`);
  return url;
}

function parseOnly(argv: readonly string[]): Set<string> | null {
  const at = argv.findIndex((a) => a === '--only' || a.startsWith('--only='));
  if (at < 0) return null;
  const arg = argv[at]!;
  const raw = arg.startsWith('--only=') ? arg.slice('--only='.length) : argv[at + 1];
  if (raw === undefined || raw === '') throw new Error('--only needs a comma-separated list of scenarios');
  const known = new Set(allNames());
  const out = new Set<string>();
  for (const name of raw.split(',').map((s) => s.trim()).filter(Boolean)) {
    const expanded = ALIASES[name] ?? [name];
    for (const n of expanded) {
      if (!known.has(n)) throw new Error(`--only: unknown scenario "${n}"; known: ${[...known, ...Object.keys(ALIASES)].join(', ')}`);
      out.add(n);
    }
  }
  return out;
}

/** BENCH_OTHER: another build of the proxy, to run beside this one (old against new, in one run). */
function otherRoot(env: NodeJS.ProcessEnv): string | null {
  const raw = env['BENCH_OTHER'];
  if (raw === undefined || raw === '') return null;
  const root = resolve(raw);
  for (const f of [join('dist', 'src', 'main.js'), join('bench', 'proxy.yaml')]) {
    if (!existsSync(join(root, f))) throw new Error(`BENCH_OTHER=${raw}: no ${f} there (a checkout of the proxy after npm ci && npm run build)`);
  }
  return root;
}

/** BENCH_TRACE_ENV=NAME=value,NAME=value: names of environment variables, values without commas. */
function traceEnv(env: NodeJS.ProcessEnv): Record<string, string> {
  const raw = env['BENCH_TRACE_ENV'] ?? '';
  const out: Record<string, string> = {};
  for (const item of raw.split(',').map((s) => s.trim()).filter(Boolean)) {
    const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(item);
    if (m === null) throw new Error(`BENCH_TRACE_ENV: "${item}" is not NAME=value (items separated by commas)`);
    out[m[1]!] = m[2]!;
  }
  return out;
}

export function parseRunOptions(argv: readonly string[], env: NodeJS.ProcessEnv): RunOptions {
  for (const a of argv) {
    if (a.startsWith('--') && !a.startsWith('--only') && a !== '--list') throw new Error(`unknown option ${a} (use --only a,b or --list)`);
  }
  const dbName = env['BENCH_DB'] ?? 'idem_bench';
  const load = chooseGenerator(env);
  if (!/^[a-z_][a-z0-9_]{0,40}$/.test(dbName)) throw new Error(`BENCH_DB=${dbName}: lower-case letters, digits and _ only`);
  const services = env['BENCH_SERVICES'] ?? 'own';
  if (services !== 'own' && services !== 'machine') throw new Error(`BENCH_SERVICES=${services}: expected own or machine`);
  return {
    only: parseOnly(argv),
    durationS: int(env, 'BENCH_DURATION', 8, 1, 120),
    warmupS: int(env, 'BENCH_WARMUP', 1, 0, 30),
    primeS: int(env, 'BENCH_PRIME', 2, 0, 30),
    tracePrimeS: int(env, 'BENCH_TRACE_PRIME', 30, 0, 120),
    reps: Math.round(int(env, 'BENCH_REPS', 3, 1, 20)),
    big: env['BENCH_BIG'] === '1',
    noPin: env['BENCH_NO_PIN'] === '1',
    adminUrl: loopback('BENCH_PG_URL', env['BENCH_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/postgres'),
    redisUrl: loopback('BENCH_REDIS_URL', env['BENCH_REDIS_URL'] ?? 'redis://127.0.0.1:6379'),
    ownPostgres: services === 'own' && (env['BENCH_PG_URL'] ?? '') === '',
    ownRedis: services === 'own' && (env['BENCH_REDIS_URL'] ?? '') === '',
    dbName,
    keepDb: env['BENCH_KEEP_DB'] === '1',
    table: env['BENCH_TABLE'] ?? null,
    proxyProfileDir: env['BENCH_PROXY_PROFILE'] ? resolve(env['BENCH_PROXY_PROFILE']) : null,
    rssSockets: Math.round(int(env, 'BENCH_RSS_SOCKETS', 1000, 1, 5000)),
    listOnly: argv.includes('--list'),
    load: load.generator,
    loadNote: load.note,
    other: otherRoot(env),
    traceEnv: traceEnv(env),
    buildTraced: flag(env, 'BENCH_BUILD_TRACED'),
  };
}

export function wants(opts: RunOptions, name: string): boolean {
  return opts.only === null || opts.only.has(name);
}
