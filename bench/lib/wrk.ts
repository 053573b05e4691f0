// The wrk load path: which generator a run uses (BENCH_LOAD, wrk on PATH), the
// Lua script that implements our KeyPlan, and one wrk run whose numbers come
// from the script's done() as one marked JSON line (never the human text).
//
// wrk runs with one thread (-t1): one Lua state, so one key counter shared by
// all connections, exactly as autocannon's keySequence(). Latency is wrk's own
// histogram (microsecond buckets, every response whatever its status, the
// clock starting when the request is written). Without a response() callback
// wrk only knows how many answers had a status > 399; a response() callback
// gives every status but makes wrk parse and copy each answer into Lua, so it
// is only defined where the breakdown is the point (the storm: 200 vs 409).
import { spawn } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import type { KeyPlan, LatencySummary, LoadGenerator } from './types.js';

export const GENERATORS: readonly LoadGenerator[] = ['wrk', 'autocannon'];
const RESULT_MARK = 'BENCH_WRK_RESULT ';
const TIMEOUT_S = 10; // as autocannon's; wrk's default (2 s) would drop slow answers from the histogram
/** Status keys when wrk only counts statuses > 399 (no response() callback). */
export const WRK_OK = '2xx/3xx';
export const WRK_FAILED = '4xx/5xx';

export function onPath(cmd: string, env: NodeJS.ProcessEnv): boolean {
  for (const dir of (env['PATH'] ?? '').split(delimiter)) {
    if (dir === '') continue;
    try {
      accessSync(join(dir, cmd), constants.X_OK);
      return true;
    } catch {
      // not here
    }
  }
  return false;
}

/** BENCH_LOAD=wrk|autocannon; unset: wrk when it is on PATH, else autocannon (with a note saying so). */
export function chooseGenerator(env: NodeJS.ProcessEnv): { generator: LoadGenerator; note: string | null } {
  const raw = env['BENCH_LOAD'];
  if (raw === undefined || raw === '') {
    if (onPath('wrk', env)) return { generator: 'wrk', note: null };
    return { generator: 'autocannon', note: 'wrk not found on PATH: load generated with autocannon (slower; it bounds the faster scenarios). Install wrk (Debian package) or set BENCH_LOAD=autocannon to silence this.' };
  }
  if (!(GENERATORS as readonly string[]).includes(raw)) throw new Error(`BENCH_LOAD=${raw}: expected ${GENERATORS.join(' or ')}`);
  if (raw === 'wrk' && !onPath('wrk', env)) throw new Error('BENCH_LOAD=wrk: wrk not found on PATH');
  return { generator: raw as LoadGenerator, note: null };
}

/** A Lua string literal: every byte outside [A-Za-z0-9 ,.:/_-] as a \ddd escape. */
function luaString(s: string): string {
  let out = '"';
  for (const b of Buffer.from(s, 'utf8')) out += /[A-Za-z0-9 ,.:/_-]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `\\${String(b).padStart(3, '0')}`;
  return `${out}"`;
}

function keyExpression(plan: KeyPlan): string {
  switch (plan.kind) {
    case 'unique':
      return 'prefix .. i';
    case 'fixed':
      return `prefix .. (i % ${plan.count})`; // the names fixedKeys(count, prefix) produces
    case 'storm':
      return `prefix .. math.floor(i / ${plan.dupes})`;
  }
}

export interface WrkScriptOptions {
  readonly origin: string;
  readonly path: string;
  readonly body: string;
  readonly keys: KeyPlan;
  readonly keyPrefix: string;
}

/** True for the plans whose report needs every status (defines response(), which slows wrk). */
export function wantsStatuses(plan: KeyPlan): boolean {
  return plan.kind === 'storm';
}

export function wrkScript(o: WrkScriptOptions): string {
  if (!Number.isInteger(o.keys.kind === 'fixed' ? o.keys.count : o.keys.kind === 'storm' ? o.keys.dupes : 1)) throw new Error('key plan: count/dupes must be integers');
  const head =
    `POST ${o.path} HTTP/1.1\r\nhost: ${new URL(o.origin).host}\r\ncontent-type: application/json\r\n` +
    `content-length: ${Buffer.byteLength(o.body)}\r\nidempotency-key: `;
  const lines = [
    '-- written by bench/lib/wrk.ts for one run; see there',
    `local head = ${luaString(head)}`,
    `local tail = ${luaString(`\r\n\r\n${o.body}`)}`,
    `local prefix = ${luaString(o.keyPrefix)}`,
    // wrk calls request() once before the run to check the script (script_verify_request) and
    // discards that request: start at -1 so the first key sent is prefix..0, as keySequence().
    'local i = -1',
    'statuses = {}',
    '',
    'function request()',
    `  local key = ${keyExpression(o.keys)}`,
    '  i = i + 1',
    '  return head .. key .. tail',
    'end',
    '',
  ];
  if (wantsStatuses(o.keys)) {
    lines.push('function response(status, headers, body)', '  statuses[status] = (statuses[status] or 0) + 1', 'end', '');
  }
  lines.push(
    'local threads = {}',
    'function setup(thread)',
    '  threads[#threads + 1] = thread',
    'end',
    '',
    'function done(summary, latency, requests)',
    '  local agg = {}',
    '  for _, t in ipairs(threads) do',
    '    local s = t:get("statuses")',
    '    if type(s) == "table" then',
    '      for code, n in pairs(s) do agg[code] = (agg[code] or 0) + n end',
    '    end',
    '  end',
    '  local parts = {}',
    '  for code, n in pairs(agg) do parts[#parts + 1] = string.format(\'"%d":%d\', code, n) end',
    '  local e = summary.errors',
    '  io.write(string.format(',
    `    '\\n${RESULT_MARK}{"durationUs":%d,"requests":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..`,
    '    \'"latencyUs":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.3f},"statusExact":%s,"status":{%s}}\\n\',',
    '    summary.duration, summary.requests, e.connect, e.read, e.write, e.status, e.timeout,',
    '    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,',
    `    ${wantsStatuses(o.keys) ? '"true"' : '"false"'}, table.concat(parts, ",")))`,
    'end',
    '',
  );
  return lines.join('\n');
}

interface WrkRaw {
  readonly durationUs: number;
  readonly requests: number;
  readonly errors: { connect: number; read: number; write: number; status: number; timeout: number };
  readonly latencyUs: { p50: number; p90: number; p99: number; max: number; mean: number };
  readonly statusExact: boolean;
  readonly status: Record<string, number>;
}

export interface WrkRun {
  readonly durationS: number;
  readonly responses: number;
  readonly status: Record<string, number>;
  readonly non2xx: number;
  readonly errors: number; // connect + read + write + timeout
  readonly timeouts: number;
  readonly latencyMs: LatencySummary;
}

export interface WrkOptions extends WrkScriptOptions {
  readonly connections: number;
  readonly durationS: number;
}

export function parseWrkOutput(stdout: string): WrkRaw {
  const line = stdout.split('\n').find((l) => l.startsWith(RESULT_MARK));
  if (line === undefined) throw new Error(`wrk printed no ${RESULT_MARK.trim()} line: ${stdout.trim().slice(-1000)}`);
  return JSON.parse(line.slice(RESULT_MARK.length)) as WrkRaw;
}

function toRun(raw: WrkRaw): WrkRun {
  const e = raw.errors;
  let status: Record<string, number>;
  let non2xx: number;
  if (raw.statusExact) {
    status = raw.status;
    non2xx = 0;
    for (const [code, n] of Object.entries(status)) if (code[0] !== '2') non2xx += n;
  } else {
    // wrk counts only statuses > 399; 3xx, if any, are among the first group.
    status = {};
    if (raw.requests - e.status > 0) status[WRK_OK] = raw.requests - e.status;
    if (e.status > 0) status[WRK_FAILED] = e.status;
    non2xx = e.status;
  }
  const ms = (us: number): number => Math.round(us) / 1000;
  return {
    durationS: raw.durationUs / 1e6,
    responses: raw.requests,
    status,
    non2xx,
    errors: e.connect + e.read + e.write + e.timeout,
    timeouts: e.timeout,
    latencyMs: raw.requests === 0
      ? { p50: 0, p90: 0, p99: 0, max: 0, mean: 0 }
      : { p50: ms(raw.latencyUs.p50), p90: ms(raw.latencyUs.p90), p99: ms(raw.latencyUs.p99), max: ms(raw.latencyUs.max), mean: ms(raw.latencyUs.mean) },
  };
}

/** One wrk run (inherits this process's CPU affinity) with a fresh Lua script in a temporary file. */
export async function runWrk(o: WrkOptions): Promise<WrkRun> {
  const dir = mkdtempSync(join(tmpdir(), 'idem-bench-wrk-'));
  const script = join(dir, 'plan.lua');
  try {
    writeFileSync(script, wrkScript(o));
    const args = ['-t1', `-c${o.connections}`, `-d${o.durationS}s`, '--timeout', `${TIMEOUT_S}s`, '-s', script, `${o.origin}${o.path}`];
    const { code, signal, stdout, stderr } = await new Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }>((resolve, reject) => {
      const cp = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      cp.stdout.on('data', (d: Buffer) => (out += d.toString()));
      cp.stderr.on('data', (d: Buffer) => (err += d.toString()));
      cp.once('error', reject);
      cp.once('close', (c, s) => resolve({ code: c, signal: s, stdout: out, stderr: err }));
    });
    if (code !== 0) throw new Error(`wrk ${args.join(' ')} failed (code ${String(code)}, signal ${String(signal)}): ${(stderr + stdout).trim().slice(-2000)}`);
    return toRun(parseWrkOutput(stdout));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
