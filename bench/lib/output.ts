// What a run leaves behind: the markdown header above the table, and the raw
// JSON file in bench/results/.
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { NODE_FLAGS } from '../../src/node-flags.js';
import type { BenchContext } from './context.js';

export interface RunFacts {
  readonly started: Date;
  readonly command: string;
  readonly loadAtStart: number;
  readonly settings: Readonly<Record<string, string>> | null;
  readonly services: string;
  readonly commitProbe: { readonly p50: number; readonly p99: number; readonly n: number } | null;
  /** BENCH_OTHER's node options (its own dist/src/node-flags.js, lib/servers.ts nodeFlagsOf); null without BENCH_OTHER. */
  readonly otherNodeFlags: readonly string[] | null;
}

export function commandLine(argv: readonly string[]): string {
  const env = Object.entries(process.env)
    .filter(([k]) => k.startsWith('BENCH_'))
    .map(([k, v]) => `${k}=${v ?? ''} `)
    .join('');
  return `${env}npm run bench${argv.length > 0 ? ` -- ${argv.join(' ')}` : ''}`;
}

function gitHead(dir: string): string {
  const r = spawnSync('git', ['-C', dir, 'log', '-1', '--format=%h %s'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim().slice(0, 60) : 'not a git checkout';
}

/**
 * The build a checkout holds, for the raw results: its commit, marked when tracked files differ from it (runs
 * of different builds are not pooled: bench/pairs-summary.ts); null outside a git checkout.
 */
function gitBuild(dir: string): string | null {
  const head = spawnSync('git', ['-C', dir, 'rev-parse', '--short=12', 'HEAD'], { encoding: 'utf8' });
  if (head.status !== 0) return null;
  const changed = spawnSync('git', ['-C', dir, 'status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' });
  return `${head.stdout.trim()}${changed.status === 0 && changed.stdout.trim() === '' ? '' : ' with uncommitted changes'}`;
}

export function headerText(ctx: BenchContext, facts: RunFacts): string {
  const { opts, pin } = ctx;
  const { settings, commitProbe } = facts;
  const loadText =
    opts.load === 'wrk'
      ? 'load: wrk -t1 with a Lua key plan (statuses: exact for the storm, else only < 400 / ≥ 400)'
      : `load: autocannon${opts.loadNote === null ? '' : ' (wrk not on PATH)'}`;
  const pinText = pin.enabled ? 'servers on CPU 0, load on CPU 1 (taskset)' : `no CPU pinning (${pin.reason})`;
  const durability =
    settings === null ? '' : `; PostgreSQL ${settings['server_version'] ?? '?'} fsync=${settings['fsync'] ?? '?'} synchronous_commit=${settings['synchronous_commit'] ?? '?'}`;
  const lines = [
    `## idempotency-proxy benchmark — ${facts.started.toISOString().slice(0, 16).replace('T', ' ')} UTC`,
    '',
    `\`${facts.command}\` — ${opts.reps} repetitions × ${opts.durationS} s (+${opts.warmupS} s warm-up), medians; ratios to the mean of the baseline runs just before and after each run; ${loadText}; ${pinText}; Node ${process.version} (${NODE_FLAGS.join(' ')} for the proxy and the baseline)${durability}; ${facts.services}`,
    '',
    `Machine load average (1 min) at start / end: ${facts.loadAtStart.toFixed(2)} / ${loadavg()[0]!.toFixed(2)} on ${availableParallelism()} CPUs — above ~2, other work shares the CPUs and absolute figures mean little.`,
  ];
  if (opts.other !== null) {
    const flags = facts.otherNodeFlags;
    const started = flags === null || flags.length === 0 ? 'no node options of its own' : `${flags.join(' ')} (its own)`;
    lines.push('', `*-other rows and the build pairs' BENCH_OTHER side: the build in ${opts.other} (${gitHead(opts.other)}), its proxy started with ${started}, on a database of its own on the same server; the others: this build (${gitHead(ctx.projectRoot)}).`);
  }
  if (commitProbe !== null) {
    lines.push('', `PostgreSQL durable single-row INSERT at 1 client, measured at the start: p50 ${commitProbe.p50} ms, p99 ${commitProbe.p99} ms (${commitProbe.n} commits).`);
  }
  return lines.join('\n');
}

/** Writes bench/results/<timestamp>.json and returns its path. */
export function writeResults(ctx: BenchContext, facts: RunFacts, body: Record<string, unknown>): string {
  const dir = join(ctx.projectRoot, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${facts.started.toISOString().replace(/[:.]/g, '-')}.json`);
  const { opts } = ctx;
  const raw = {
    startedAt: facts.started.toISOString(),
    finishedAt: new Date().toISOString(),
    command: facts.command,
    options: { ...opts, only: opts.only === null ? null : [...opts.only] },
    node: process.version,
    build: gitBuild(ctx.projectRoot),
    otherBuild: opts.other === null ? null : gitBuild(opts.other),
    // Node options every process of the run inherited, besides NODE_FLAGS (pairs-summary pools only runs alike).
    nodeOptions: process.env['NODE_OPTIONS'] || null,
    nodeFlags: NODE_FLAGS,
    otherNodeFlags: facts.otherNodeFlags,
    loadAverage: { start: facts.loadAtStart, end: loadavg()[0] },
    pinning: { enabled: ctx.pin.enabled, reason: ctx.pin.reason },
    postgres: facts.settings,
    services: facts.services,
    commitProbe: facts.commitProbe,
    ...body,
  };
  writeFileSync(file, `${JSON.stringify(raw, null, 2)}\n`);
  return file;
}
