// Plain PostgreSQL against Citus, in one run on this machine (docs/scale.md):
//
//   CITUS_PG_BIN=/usr/lib/postgresql/15/bin node dist/bench/citus.js
//
// Starts a Citus cluster (tools/citus-cluster.ts: a coordinator and two
// workers, fsync off), makes two databases on the coordinator — `idem_citus`
// with the extension (the table distributed by migrate) and `idem_plain`
// without it (plain PostgreSQL: same server, same settings) — one upstream,
// and one proxy per database through the CLI. Then, alternating the two
// proxies, BENCH_CITUS_REPS times: new keys and replays (no Redis) at 1
// connection (p50, p90) and at 50 connections (requests per second), tenants
// from a header (BENCH_CITUS_TENANTS of them, default 16, round robin).
// Medians of the repetitions are printed as one JSON object per line.
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import pg from 'pg';
import { startCitusCluster } from '../tools/citus-cluster.js';

const DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SECONDS = Number(process.env.BENCH_CITUS_SECONDS ?? 5);
const REPS = Number(process.env.BENCH_CITUS_REPS ?? 3);
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

interface Sample { p50: number; p90: number; rps: number; errors: number }

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
  return { p50: q(0.5), p90: q(0.9), rps: Math.round(lat.length / seconds), errors };
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
    const results: Record<string, Record<string, Sample[]>> = { plain: {}, citus: {} };
    const record = (side: string, what: string, s: Sample): void => {
      (results[side]![what] ??= []).push(s);
      process.stderr.write(`${side} ${what} ${JSON.stringify(s)}\n`);
    };
    if (INSTANCES.length > 0) {
      await instanceCurve(config, upstream, plainUrl, children);
      return;
    }
    for (let rep = 0; rep < REPS; rep++) {
      for (const side of rep % 2 === 0 ? ['plain', 'citus'] : ['citus', 'plain']) {
        const origin = proxies[side]!;
        const fresh = (i: number): number => i;
        const replayed = (i: number): number => i % 500;
        record(side, 'newkey-1', await load(origin, 1, `n1-${rep}`, fresh, SECONDS));
        await load(origin, 1, 'r', replayed, 2); // warms the replay keys
        record(side, 'replay-1', await load(origin, 1, 'r', replayed, SECONDS));
        record(side, 'newkey-50', await load(origin, 50, `n50-${rep}`, fresh, SECONDS));
        record(side, 'replay-50', await load(origin, 50, 'r', replayed, SECONDS));
      }
    }
    for (const side of ['plain', 'citus']) {
      for (const [what, samples] of Object.entries(results[side]!)) {
        process.stdout.write(`${JSON.stringify({
          side, what, p50: median(samples.map((s) => s.p50)), p90: median(samples.map((s) => s.p90)),
          rps: median(samples.map((s) => s.rps)), errors: samples.reduce((a, s) => a + s.errors, 0),
        })}\n`);
      }
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
