// Plain PostgreSQL against Citus, in one run on this machine (docs/scale.md):
//
//   CITUS_PG_BIN=/usr/lib/postgresql/15/bin node dist/bench/citus.js
//
// Starts a Citus cluster (tools/citus-cluster.ts: a coordinator and two
// workers, fsync off), makes two databases on the coordinator — `idem_citus`
// with the extension (the table distributed by migrate) and `idem_plain`
// without it (plain PostgreSQL: same server, same settings) — one upstream,
// and one proxy per database through the CLI. Then, alternating the two
// proxies: new keys and replays (no Redis) at 1
// connection (p50, p90) and at 50 connections (requests per second), tenants
// from a header (BENCH_CITUS_TENANTS of them, default 16, round robin). The
// sides alternate in windows of BENCH_CITUS_SECONDS (1.5), BENCH_CITUS_REPS
// (16) windows each; one JSON line per scenario: percentiles over all of a
// side's requests, the median of its windows' requests per second.
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import pg from 'pg';
import { startCitusCluster } from '../tools/citus-cluster.js';

const DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SECONDS = Number(process.env.BENCH_CITUS_SECONDS ?? 1.5); // per window
const REPS = Number(process.env.BENCH_CITUS_REPS ?? 16); // windows per side and scenario
const TENANTS = Number(process.env.BENCH_CITUS_TENANTS ?? 16);
const CONFIG = `listen: 127.0.0.1:0
admin: 127.0.0.1:0
logLevel: info
upstream:
  url: \${BENCH_UPSTREAM_URL}
  connections: 128
routes:
  - name: bench
    match: { methods: [POST], path: /bench/** }
    mode: enforce
    required: true
    tenant: { fromHeader: x-tenant }
`;

function startChild(args: string[], env: NodeJS.ProcessEnv, ready: RegExp): Promise<{ child: ChildProcess; line: string }> {
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let buf = '';
    let done = false;
    child.stdout!.on('data', (d: Buffer) => {
      if (done) return; // drained, not kept: the proxy logs a line per request
      buf += d.toString();
      const line = buf.split('\n').find((l) => ready.test(l));
      if (line !== undefined) { done = true; buf = ''; resolve({ child, line }); }
    });
    child.on('exit', (code) => reject(new Error(`${args.join(' ')} exited ${code}: ${buf}`)));
  });
}

interface Sample { p50: number; p90: number; rps: number; errors: number; lat: number[] }

/** Request i sends key `${prefix}-${k}` of tenant k % TENANTS, k = keyOf(i): a key always has one tenant. */
async function load(origin: string, connections: number, prefix: string, keyOf: (i: number) => number, seconds: number): Promise<Sample> {
  const pool = new Pool(origin, { connections });
  const lat: number[] = [];
  let errors = 0;
  let n = 0;
  const end = performance.now() + seconds * 1000;
  const body = '{"order":1}';
  await Promise.all(Array.from({ length: connections }, async () => {
    while (performance.now() < end) {
      const k = keyOf(n++);
      const t0 = performance.now();
      const r = await pool.request({
        method: 'POST', path: '/bench/x', body,
        headers: { 'content-type': 'application/json', 'idempotency-key': `${prefix}-${k}`, 'x-tenant': `tenant-${k % TENANTS}` },
      });
      await r.body.text();
      lat.push(performance.now() - t0);
      if (r.statusCode !== 200) errors++;
    }
  }));
  await pool.close();
  lat.sort((a, b) => a - b);
  const q = (p: number): number => Number(lat[Math.floor(p * (lat.length - 1))]!.toFixed(2));
  return { p50: q(0.5), p90: q(0.9), rps: Math.round(lat.length / seconds), errors, lat };
}

const INSTANCES = (process.env.BENCH_CITUS_INSTANCES ?? '').split(',').filter(Boolean).map(Number);

/** New keys at 50 connections spread over 1, 2, 3… proxies on the one plain database. */
async function instanceCurve(config: string, upstream: string, url: string, children: ChildProcess[]): Promise<void> {
  const origins: string[] = [];
  for (let n = 1; n <= Math.max(...INSTANCES); n++) {
    const p = await startChild([path.join(DIST, 'src/main.js'), 'serve', '--config', config, '--database-url', url],
      { BENCH_UPSTREAM_URL: upstream }, /proxy listening/);
    children.push(p.child);
    origins.push((JSON.parse(p.line) as { url: string }).url);
  }
  for (let rep = 0; rep < REPS; rep++) {
    for (const n of INSTANCES) {
      const per = Math.round(50 / n);
      const samples = await Promise.all(origins.slice(0, n).map((o, j) => load(o, per, `i${n}-${rep}-${j}`, (i) => i, SECONDS)));
      const rps = samples.reduce((a, s) => a + s.rps, 0);
      process.stdout.write(`${JSON.stringify({ instances: n, rep, rps, p50: median(samples.map((s) => s.p50)), errors: samples.reduce((a, s) => a + s.errors, 0) })}\n`);
    }
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const cluster = await startCitusCluster();
  const work = mkdtempSync(path.join(tmpdir(), 'idem-bench-citus-'));
  const children: ChildProcess[] = [];
  try {
    const citusUrl = await cluster.createDatabase('idem_citus');
    const admin = new pg.Client({ connectionString: cluster.url });
    await admin.connect();
    await admin.query('CREATE DATABASE idem_plain');
    await admin.end();
    const plainUrl = citusUrl.replace(/idem_citus$/, 'idem_plain');
    const up = await startChild([path.join(DIST, 'bench/upstream.js'), '--port', '0'], {}, /"url"/);
    children.push(up.child);
    const upstream = (JSON.parse(up.line) as { url: string }).url;
    const config = path.join(work, 'proxy.yaml');
    writeFileSync(config, CONFIG);
    const proxies: Record<string, string> = {};
    for (const [name, url] of [['plain', plainUrl], ['citus', citusUrl]] as const) {
      const p = await startChild([path.join(DIST, 'src/main.js'), 'serve', '--config', config, '--database-url', url],
        { BENCH_UPSTREAM_URL: upstream }, /proxy listening/);
      children.push(p.child);
      proxies[name] = (JSON.parse(p.line) as { url: string }).url;
    }
    if (INSTANCES.length > 0) {
      await instanceCurve(config, upstream, plainUrl, children);
      return;
    }
    // Short windows, the two sides alternating: both see the same load from
    // the rest of the machine (a shared 2-core VM's load moves within seconds).
    const scenarios: Array<[string, number, (rep: number) => string, (i: number) => number]> = [
      ['newkey-1', 1, (w) => `n1-${w}`, (i) => i],
      ['replay-1', 1, () => 'r', (i) => i % 500],
      ['newkey-50', 50, (w) => `n50-${w}`, (i) => i],
      ['replay-50', 50, () => 'r', (i) => i % 500],
    ];
    for (const side of ['plain', 'citus']) await load(proxies[side]!, 4, 'r', (i) => i % 500, 2); // warms the replay keys
    for (const [what, conns, prefix, keyOf] of scenarios) {
      const lat: Record<string, number[]> = { plain: [], citus: [] };
      const rps: Record<string, number[]> = { plain: [], citus: [] };
      let errors = 0;
      for (let w = 0; w < REPS; w++) {
        for (const side of w % 2 === 0 ? ['plain', 'citus'] : ['citus', 'plain']) {
          const sm = await load(proxies[side]!, conns, `${side}-${prefix(w)}`, keyOf, SECONDS);
          lat[side]!.push(...sm.lat);
          rps[side]!.push(sm.rps);
          errors += sm.errors;
        }
      }
      const q = (xs: number[], p: number): number => Number([...xs].sort((a, b) => a - b)[Math.floor(p * (xs.length - 1))]!.toFixed(2));
      const out = Object.fromEntries(['plain', 'citus'].map((side) => [side, {
        p50: q(lat[side]!, 0.5), p90: q(lat[side]!, 0.9), rps: median(rps[side]!),
      }]));
      process.stdout.write(`${JSON.stringify({ what, ...out, p50Ratio: Number((out.citus!.p50 / out.plain!.p50).toFixed(2)), errors })}\n`);
    }
  } finally {
    for (const c of children) c.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 500));
    await cluster.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench/citus: ${(err as Error).message}\n`);
  process.exitCode = 1;
});
