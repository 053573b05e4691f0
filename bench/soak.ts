// Soak: steady mixed load for a configurable duration against a spawned
// proxy on a fresh database, so leaks and drift show. Not in CI.
//
//   npm run build && node dist/bench/soak.js --duration 60s [--workers 16]
//     [--report-every 5s] [--lease 2s] [--keep-db] [--node-options=--max-old-space-size=64]
//
// Mix per worker iteration: new key (executes), retry of a completed key
// (replay, byte for byte), three identical requests at once on a new key
// (one execution; the others 409 or replay), the same key with another
// payload (422), and a passthrough request. Reported every interval:
// throughput, answers that break the contract, latency, proxy RSS, and the
// mean claim and commit time from the proxy's own metrics (so drift can be
// placed: proxy or database). At the
// end: upstream executions per key (every key must have exactly one) and
// records in the store. Exits 1 if the contract was broken.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Agent, request } from 'undici';
import { parseDuration } from '../src/config/units.js';
import { createTestDatabase } from '../test/helpers/db.js';
import { MAIN } from '../test/helpers/proxy.js';

type Op = 'new' | 'retry' | 'duplicates' | 'mismatch' | 'passthrough';
const MIX: ReadonlyArray<[Op, number]> = [['new', 50], ['retry', 20], ['duplicates', 10], ['mismatch', 10], ['passthrough', 10]];

interface Options { durationMs: number; workers: number; everyMs: number; leaseMs: number; keepDb: boolean; nodeOptions: string }

function options(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      duration: { type: 'string', default: '60s' },
      workers: { type: 'string', default: '16' },
      'report-every': { type: 'string', default: '5s' },
      lease: { type: 'string', default: '2s' },
      'keep-db': { type: 'boolean', default: false },
      'node-options': { type: 'string', default: '' },
    },
    strict: true,
  });
  const workers = Number(values.workers);
  if (!Number.isInteger(workers) || workers < 1) throw new Error(`--workers: not a positive integer: ${values.workers}`);
  return {
    durationMs: parseDuration(values.duration!),
    workers,
    everyMs: parseDuration(values['report-every']!),
    leaseMs: parseDuration(values.lease!),
    keepDb: values['keep-db']!,
    nodeOptions: values['node-options']!,
  };
}

/** The upstream: answers at once and counts executions per key. */
async function startUpstream(): Promise<{ url: string; executions: Map<string, number>; close(): Promise<void> }> {
  const executions = new Map<string, number>();
  let n = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const key = req.headers['idempotency-key'] as string | undefined;
      if (key !== undefined) executions.set(key, (executions.get(key) ?? 0) + 1);
      const body = JSON.stringify({ n: ++n, key: key ?? null, got: Buffer.concat(chunks).length });
      res.writeHead(req.method === 'GET' ? 200 : 201, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
  });
  server.keepAliveTimeout = 70_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    executions,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

/**
 * The proxy as a child process whose log goes to a file (as to a log
 * collector in production), not through this process: the load generator
 * must not spend its CPU reading the proxy's log lines.
 */
async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const port = (probe.address() as AddressInfo).port;
  await new Promise<void>((r) => probe.close(() => r()));
  return port;
}

async function startProxyProcess(args: string[], logFile: string, nodeOptions: string): Promise<{ url: string; adminUrl: string; pid: number; stop(): Promise<number> }> {
  const port = await freePort();
  const adminPort = await freePort();
  const fd = openSync(logFile, 'w');
  const proc = spawn(process.execPath, [MAIN, ...args, '--listen', `127.0.0.1:${port}`, '--admin', `127.0.0.1:${adminPort}`], {
    stdio: ['ignore', fd, fd],
    env: { PATH: process.env.PATH, ...(nodeOptions === '' ? {} : { NODE_OPTIONS: nodeOptions }) },
  });
  closeSync(fd);
  const exited = once(proc, 'exit');
  const deadline = Date.now() + 30_000;
  while (!readFileSync(logFile, 'utf8').includes('"proxy listening"')) {
    if (proc.exitCode !== null || Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`the proxy did not start:\n${readFileSync(logFile, 'utf8')}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url: `http://127.0.0.1:${port}`,
    adminUrl: `http://127.0.0.1:${adminPort}`,
    pid: proc.pid!,
    async stop() {
      proc.kill('SIGTERM');
      await exited;
      return readFileSync(logFile, 'utf8').split('\n').length - 1;
    },
  };
}

/** Cumulative sum and count of the proxy's store-latency histogram, per statement. */
async function storeTimes(adminUrl: string): Promise<Record<string, { sum: number; count: number }>> {
  const out: Record<string, { sum: number; count: number }> = {};
  try {
    const text = await (await fetch(`${adminUrl}/metrics`)).text();
    for (const m of text.matchAll(/^idempotency_proxy_store_duration_seconds_(sum|count)\{op="(\w+)"\} ([\d.e+-]+)$/gm)) {
      const e = (out[m[2]!] ??= { sum: 0, count: 0 });
      e[m[1] as 'sum' | 'count'] = Number(m[3]);
    }
  } catch {
    /* the admin listener is optional for the figures */
  }
  return out;
}

/** Mean milliseconds of one op between two scrapes. */
function meanMs(a: Record<string, { sum: number; count: number }>, b: Record<string, { sum: number; count: number }>, op: string): string {
  const n = (b[op]?.count ?? 0) - (a[op]?.count ?? 0);
  return n > 0 ? ((((b[op]?.sum ?? 0) - (a[op]?.sum ?? 0)) / n) * 1000).toFixed(2) : '-';
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m === null ? NaN : Number(m[1]) / 1024;
}

class Interval {
  requests = 0;
  readonly latencies: number[] = [];
  record(ms: number): void {
    this.requests++;
    this.latencies.push(ms);
  }
  percentile(p: number): number {
    if (this.latencies.length === 0) return NaN;
    const s = [...this.latencies].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
  }
}

interface Totals { requests: number; ops: Record<Op, number>; statuses: Map<number | string, number>; violations: string[] }

async function main(): Promise<number> {
  const o = options(process.argv.slice(2));
  // Everything started is stopped again, also when the run fails half-way.
  const cleanups: Array<() => unknown> = [];
  try {
    return await soak(o, cleanups);
  } finally {
    for (const c of cleanups.reverse()) await c();
  }
}

async function soak(o: Options, cleanups: Array<() => unknown>): Promise<number> {
  const db = await createTestDatabase();
  if (!o.keepDb) cleanups.push(() => db.drop());
  const up = await startUpstream();
  cleanups.push(() => up.close());
  const dir = mkdtempSync(path.join(tmpdir(), 'idem-soak-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const yaml = path.join(dir, 'soak.yaml');
  // logLevel info: one line per request, as in production (and the "proxy listening" line spawnProxy waits for).
  writeFileSync(yaml, `upstream: { timeout: 10s }
defaults:
  lease: ${o.leaseMs}ms
  tenant: { fromHeader: x-tenant }
routes:
  - name: orders
    match: { path: "/orders/**" }
  - name: rest
    match: { path: "/**" }
    mode: passthrough
`);
  const proxy = await startProxyProcess(['serve', '--config', yaml, '--upstream', up.url, '--database-url', db.url], path.join(dir, 'proxy.log'), o.nodeOptions);
  cleanups.push(async () => console.log(`proxy log: ${await proxy.stop()} lines`));
  const pid = proxy.pid;
  const agent = new Agent({ connections: o.workers * 3, keepAliveTimeout: 60_000 });
  cleanups.push(() => agent.close());
  const totals: Totals = { requests: 0, ops: { new: 0, retry: 0, duplicates: 0, mismatch: 0, passthrough: 0 }, statuses: new Map(), violations: [] };
  const completed: Array<{ key: string; tenant: string; body: string; answer: string }> = [];
  const fresh = new Set<string>();
  let interval = new Interval();
  let seq = 0;

  const call = async (method: 'POST' | 'GET', p: string, key: string | null, tenant: string, body: string | undefined) => {
    const t0 = performance.now();
    const headers: Record<string, string> = { 'x-tenant': tenant, 'content-type': 'application/json' };
    if (key !== null) headers['idempotency-key'] = key;
    try {
      const r = await request(`${proxy.url}${p}`, { method, headers, body, dispatcher: agent });
      const text = await r.body.text();
      interval.record(performance.now() - t0);
      totals.requests++;
      totals.statuses.set(r.statusCode, (totals.statuses.get(r.statusCode) ?? 0) + 1);
      return { status: r.statusCode, replayed: r.headers['idempotent-replayed'] === 'true', text };
    } catch (err) {
      totals.statuses.set('network', (totals.statuses.get('network') ?? 0) + 1);
      return { status: 0, replayed: false, text: (err as Error).message };
    }
  };
  const violation = (what: string): void => {
    if (totals.violations.length < 50) totals.violations.push(what);
    else totals.violations[49] = `… and more (last: ${what})`;
  };
  const pick = (): Op => {
    let r = Math.random() * 100;
    for (const [op, w] of MIX) if ((r -= w) < 0) return op;
    return 'new';
  };

  const deadline = Date.now() + o.durationMs;
  const worker = async (w: number): Promise<void> => {
    const tenant = `tenant-${w % 4}`;
    while (Date.now() < deadline) {
      let op = pick();
      if ((op === 'retry' || op === 'mismatch') && completed.length === 0) op = 'new';
      totals.ops[op]++;
      if (op === 'new') {
        const key = `soak-${w}-${++seq}`;
        const body = JSON.stringify({ amount: seq });
        const r = await call('POST', '/orders/1', key, tenant, body);
        if (r.status !== 201 || r.replayed) violation(`new key ${key}: ${r.status} ${r.text.slice(0, 120)}`);
        else { fresh.add(key); completed.push({ key, tenant, body, answer: r.text }); }
      } else if (op === 'retry') {
        const c = completed[Math.floor(Math.random() * completed.length)]!;
        const r = await call('POST', '/orders/1', c.key, c.tenant, c.body);
        if (r.status !== 201 || !r.replayed || r.text !== c.answer) violation(`retry ${c.key}: ${r.status} replayed=${r.replayed}`);
      } else if (op === 'mismatch') {
        const c = completed[Math.floor(Math.random() * completed.length)]!;
        const r = await call('POST', '/orders/1', c.key, c.tenant, JSON.stringify({ other: true }));
        if (r.status !== 422) violation(`mismatch ${c.key}: ${r.status}`);
      } else if (op === 'duplicates') {
        const key = `soak-dup-${w}-${++seq}`;
        const body = JSON.stringify({ dup: seq });
        const rs = await Promise.all([0, 1, 2].map(() => call('POST', '/orders/1', key, tenant, body)));
        const executed = rs.filter((r) => r.status === 201 && !r.replayed);
        const others = rs.filter((r) => !(r.status === 201 && !r.replayed));
        if (executed.length !== 1) violation(`duplicates ${key}: ${executed.length} fresh answers`);
        for (const r of others) if (r.status !== 409 && !(r.status === 201 && r.replayed)) violation(`duplicates ${key}: ${r.status}`);
        if (executed.length === 1) { fresh.add(key); completed.push({ key, tenant, body, answer: executed[0]!.text }); }
      } else {
        const r = await call('GET', '/status', null, tenant, undefined);
        if (r.status !== 200) violation(`passthrough: ${r.status}`);
      }
    }
  };

  const t0 = Date.now();
  const samples: Array<{ s: number; rss: number }> = [];
  console.log(`soak: ${o.workers} workers for ${o.durationMs / 1000} s, lease ${o.leaseMs} ms, proxy pid ${pid}, database ${db.name}`);
  console.log('   t(s)   req/s   p50 ms   p99 ms   requests  violations  proxy RSS MiB  claim ms  commit ms');
  let store = await storeTimes(proxy.adminUrl);
  let printing: Promise<void> = Promise.resolve();
  const reporter = setInterval(() => {
    const s = (Date.now() - t0) / 1000;
    const rss = rssMiB(pid);
    samples.push({ s, rss });
    const rate = interval.requests / (o.everyMs / 1000);
    const line = `${s.toFixed(0).padStart(7)} ${rate.toFixed(0).padStart(7)} ${interval.percentile(50).toFixed(2).padStart(8)} ${interval.percentile(99).toFixed(2).padStart(8)} ${String(totals.requests).padStart(10)} ${String(totals.violations.length).padStart(11)} ${rss.toFixed(1).padStart(14)}`;
    interval = new Interval();
    printing = storeTimes(proxy.adminUrl).then((now) => {
      console.log(`${line} ${meanMs(store, now, 'claim').padStart(9)} ${meanMs(store, now, 'commit').padStart(10)}`);
      store = now;
    });
  }, o.everyMs);
  cleanups.push(() => clearInterval(reporter));
  await Promise.all(Array.from({ length: o.workers }, (_, w) => worker(w)));
  clearInterval(reporter);
  await printing;
  const elapsed = (Date.now() - t0) / 1000;

  // Executions per key: every key that got a fresh answer ran exactly once; no key ran twice.
  let twice = 0;
  for (const [key, n] of up.executions) if (n > 1) { twice++; violation(`${key} executed ${n} times`); }
  let missing = 0;
  for (const key of fresh) if (up.executions.get(key) !== 1) { missing++; violation(`${key}: ${up.executions.get(key) ?? 0} executions`); }
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  const { rows } = await client.query<{ state: string; n: number }>('SELECT state, count(*)::int AS n FROM idempotency_keys GROUP BY state');
  await client.end();
  const records = Object.fromEntries(rows.map((r) => [r.state, r.n]));
  if ((records.complete ?? 0) !== fresh.size) violation(`store has ${records.complete ?? 0} complete records for ${fresh.size} executed keys`);

  const warm = samples.filter((x) => x.s >= Math.min(10, elapsed / 3));
  const slope = warm.length >= 2 ? ((warm.at(-1)!.rss - warm[0]!.rss) / (warm.at(-1)!.s - warm[0]!.s)) * 60 : NaN;
  const summary = {
    durationS: Math.round(elapsed),
    requests: totals.requests,
    throughputPerS: Math.round(totals.requests / elapsed),
    ops: totals.ops,
    statuses: Object.fromEntries(totals.statuses),
    keysExecuted: fresh.size,
    maxExecutionsPerKey: Math.max(0, ...up.executions.values()),
    keysExecutedTwice: twice,
    keysWithoutExactlyOneExecution: missing,
    records,
    rssMiB: { first: samples[0]?.rss, last: samples.at(-1)?.rss, max: Math.max(...samples.map((x) => x.rss)), slopeAfterWarmupMiBPerMin: Number(slope.toFixed(2)) },
    violations: totals.violations,
  };
  console.log(JSON.stringify(summary, null, 2));

  return totals.violations.length === 0 ? 0 : 1;
}

process.exitCode = await main();
