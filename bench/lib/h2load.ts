// The HTTP/2 load path: h2load (Debian's nghttp2-client), ALPN h2 over TLS.
//
// h2load sends one fixed header set and walks a list of URIs (-i), so a key
// plan is a URI list: the key is the path's last segment under a constant
// Idempotency-Key, on a route with keyScope: tenantAndPath (bench/proxy.yaml,
// route h2). h2load gives every client its own walk from the top of that list
// (-c 4 would send each URI four times: duplicates, not new keys), so each
// connection is an h2load process of its own (-c1 -m<streams>) with a list of
// its own, all started together; their counts are summed and the latencies
// come from their per-request logs (--log-file: microseconds per response),
// as h2load prints no percentiles.
import { execFileSync, spawn } from 'node:child_process';
import { createWriteStream, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { KeyPlan, LatencySummary } from './types.js';
import { onPath, type WrkRun } from './wrk.js';

/** The Idempotency-Key every h2 request carries; the key proper is in the path. */
export const H2_KEY_HEADER_VALUE = 'in-path';
/** URIs written per connection and second: a new-key run that answers faster than this would wrap (and is reported as failed). */
const URIS_PER_CONNECTION_SECOND = 12_000;
export const H2LOAD_PACKAGE = 'nghttp2-client';

/** `<path>/<key>`: what an h2 request for `key` asks for (the warm-up of replay keys sends the same). */
export function keyedPath(path: string, key: string): string {
  return `${path}/${encodeURIComponent(key)}`;
}

/**
 * h2load on PATH, or installed from Debian's nghttp2-client as the container
 * test installs docker.io (apt-get as root; an apt-get update only if the
 * install fails). Throws saying how to install it otherwise.
 */
export function ensureH2load(log: (msg: string) => void): void {
  if (onPath('h2load', process.env)) return;
  const how = `apt-get install -y ${H2LOAD_PACKAGE}`;
  if (process.getuid?.() !== 0) throw new Error(`the HTTP/2 rows need h2load (Debian package ${H2LOAD_PACKAGE}): ${how}`);
  log(`h2load not on PATH: ${how}`);
  const install = (): void => void execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', H2LOAD_PACKAGE], { stdio: 'ignore', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
  try {
    install();
  } catch {
    try {
      execFileSync('apt-get', ['update', '-qq'], { stdio: 'ignore' });
      install();
    } catch (err) {
      throw new Error(`the HTTP/2 rows need h2load and ${how} failed (${(err as Error).message})`);
    }
  }
  if (!onPath('h2load', process.env)) throw new Error(`${how} ran, yet h2load is not on PATH`);
}

export interface H2loadOptions {
  readonly origin: string; // https://127.0.0.1:N
  readonly path: string;
  readonly body: string;
  readonly keys: KeyPlan;
  readonly keyPrefix: string;
  readonly durationS: number;
  readonly connections: number;
  readonly streams: number;
}

/** The keys connection `c` sends, in order; h2load starts again at the top if it gets through them. */
function keysFor(o: H2loadOptions, c: number): string[] {
  switch (o.keys.kind) {
    case 'unique': {
      const n = URIS_PER_CONNECTION_SECOND * o.durationS;
      return Array.from({ length: n }, (_, i) => `${o.keyPrefix}c${c}-${i}`);
    }
    case 'fixed': {
      // The warmed keys (lib/keys.ts fixedKeys), each connection starting at its own place in them.
      const count = o.keys.count;
      const start = Math.floor((c * count) / o.connections);
      return Array.from({ length: count }, (_, i) => `${o.keyPrefix}${(start + i) % count}`);
    }
    case 'storm':
      throw new Error('h2load: the storm plan is not supported over HTTP/2');
  }
}

interface Counts {
  durationS: number;
  done: number;
  errored: number;
  timeout: number;
  status: Record<string, number>;
}

export function parseH2loadOutput(stdout: string): Counts {
  // h2load prints the run's length in the unit that suits it: `999.00ms` for a run that ended
  // just under its second, `2.00s` otherwise (nghttp2's util::format_duration).
  const finished = /finished in ([\d.]+)(us|ms|s),/.exec(stdout);
  const req = /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(stdout);
  const codes = /status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/.exec(stdout);
  if (finished === null || req === null || codes === null) throw new Error(`h2load printed no summary: ${stdout.trim().slice(-1000)}`);
  const status: Record<string, number> = {};
  ['2xx', '3xx', '4xx', '5xx'].forEach((k, i) => {
    const n = Number(codes[i + 1]);
    if (n > 0) status[k] = n;
  });
  const durationS = Number(finished[1]) / (finished[2] === 's' ? 1 : finished[2] === 'ms' ? 1e3 : 1e6);
  return { durationS, done: Number(req[3]), errored: Number(req[6]), timeout: Number(req[7]), status };
}

function latencies(files: readonly string[]): LatencySummary {
  const us: number[] = [];
  for (const f of files) {
    for (const line of readFileSync(f, 'utf8').split('\n')) {
      const cols = line.split('\t');
      if (cols.length >= 3) us.push(Number(cols[2]));
    }
  }
  if (us.length === 0) return { p50: 0, p90: 0, p99: 0, max: 0, mean: 0 };
  const sorted = Float64Array.from(us).sort();
  const at = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! / 1000;
  const mean = us.reduce((a, b) => a + b, 0) / us.length / 1000;
  return { p50: at(0.5), p90: at(0.9), p99: at(0.99), max: sorted[sorted.length - 1]! / 1000, mean: Number(mean.toFixed(3)) };
}

function writeLines(file: string, lines: readonly string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const out = createWriteStream(file);
    out.on('error', reject);
    for (let i = 0; i < lines.length; i += 10_000) out.write(`${lines.slice(i, i + 10_000).join('\n')}\n`);
    out.end(resolve);
  });
}

function h2load(args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const cp = spawn('h2load', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    cp.stdout.on('data', (d: Buffer) => (out += d.toString()));
    cp.stderr.on('data', (d: Buffer) => (err += d.toString()));
    cp.once('error', (e) => reject(new Error(`h2load could not be started (${e.message}): apt-get install ${H2LOAD_PACKAGE}`)));
    cp.once('close', (code, signal) => {
      if (code === 0) resolve(out);
      else reject(new Error(`h2load ${args.join(' ')} failed (code ${String(code)}, signal ${String(signal)}): ${(err + out).trim().slice(-2000)}`));
    });
  });
}

/** One measured run: `connections` h2load processes (each inherits this process's CPU pinning) started together. */
export async function runH2load(o: H2loadOptions): Promise<WrkRun> {
  const dir = mkdtempSync(join(tmpdir(), 'idem-bench-h2load-'));
  try {
    const body = join(dir, 'body');
    writeFileSync(body, o.body);
    const lists: string[][] = [];
    for (let c = 0; c < o.connections; c += 1) {
      const keys = keysFor(o, c);
      lists.push(keys);
      await writeLines(join(dir, `uris-${c}`), keys.map((k) => `${o.origin}${keyedPath(o.path, k)}`));
    }
    // Every process is waited for before any failure is thrown: one left running would go on
    // sending into the next run (and its files are removed below).
    const settled = await Promise.allSettled(lists.map((_, c) => h2load([
      '-t1', '-c1', `-m${o.streams}`, `-D${o.durationS}`, '-i', join(dir, `uris-${c}`), '-d', body,
      '-H', 'content-type: application/json', '-H', `idempotency-key: ${H2_KEY_HEADER_VALUE}`, `--log-file=${join(dir, `log-${c}`)}`,
    ]).then((out) => {
      const counts = parseH2loadOutput(out);
      // A connection that got no answer in the whole run is a failed run, not a row of 0 req/s
      // (averaged into its neighbours' baseline, a 0 doubled their ratios).
      if (counts.done === 0) throw new Error(`h2load: connection ${c} got no response in ${o.durationS} s: ${out.trim().slice(-600)}`);
      return counts;
    })));
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
    const runs = settled.map((r) => (r as PromiseFulfilledResult<Counts>).value);
    const status: Record<string, number> = {};
    let responses = 0;
    let errors = 0;
    let timeouts = 0;
    for (const [c, r] of runs.entries()) {
      if (o.keys.kind === 'unique' && r.done >= lists[c]!.length) {
        throw new Error(`h2load: connection ${c} got through its ${lists[c]!.length} new keys and started again (replays): raise URIS_PER_CONNECTION_SECOND in lib/h2load.ts`);
      }
      responses += r.done;
      errors += r.errored;
      timeouts += r.timeout;
      for (const [k, n] of Object.entries(r.status)) status[k] = (status[k] ?? 0) + n;
    }
    const non2xx = Object.entries(status).reduce((a, [k, n]) => (k === '2xx' ? a : a + n), 0);
    const durationS = Math.max(...runs.map((r) => r.durationS));
    return { durationS, responses, status, non2xx, errors, timeouts, latencyMs: latencies(lists.map((_, c) => join(dir, `log-${c}`))) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
