// The load generator, one process per measurement (the harness pins it to its
// own CPU). Takes a LoadSpec as one JSON argument, prints one JSON line.
//
//   node dist/bench/load.js '{"mode":"cannon","origin":"http://127.0.0.1:N",...}'
//
// mode "cannon": optional warm-up run, key warming for replay plans, then the
//   measured run; reports req/s, latency, statuses, errors and how many
//   requests reached the upstream meanwhile. The runs use wrk (a child process,
//   so it inherits this process's CPU pinning; lib/wrk.ts) or autocannon
//   (in-process; lib/cannon.ts): spec.generator, else BENCH_LOAD, else wrk when
//   it is on PATH.
// mode "rss": opens N keep-alive sockets (see lib/rss-load.ts) and holds them
//   until stdin closes.
import { Pool } from 'undici';
import { runCannon } from './lib/cannon.js';
import { isEntry } from './lib/cli-args.js';
import { fixedKeys, keySequence } from './lib/keys.js';
import { latencyRecorder } from './lib/latency.js';
import { holdOpenConnections } from './lib/rss-load.js';
import type { CannonResult, CannonSpec, LatencySummary, LoadGenerator, LoadSpec } from './lib/types.js';
import { chooseGenerator, runWrk } from './lib/wrk.js';
import { H2_KEY_HEADER_VALUE, keyedPath, runH2load } from './lib/h2load.js';

const WARM_CONCURRENCY = 50;

async function upstreamCount(statsUrl: string | null): Promise<number | null> {
  if (statsUrl === null) return null;
  const res = await fetch(statsUrl);
  const body = (await res.json()) as { n: number };
  return body.n;
}

/** Sends every key of a fixed plan `passes` times, so the measured run only replays. */
async function warmKeys(spec: CannonSpec, keys: readonly string[], passes: number): Promise<CannonResult['warm']> {
  // The run's certificate is self-signed (lib/certificate.ts): not verified here, as wrk and h2load never do.
  const pool = new Pool(spec.origin, { connections: WARM_CONCURRENCY, connect: { rejectUnauthorized: false } });
  // Over HTTP/2 the key is in the path (lib/h2load.ts); warmed over HTTP/1.1 on the same TLS listener, same record.
  const inPath = spec.protocol === 'h2';
  const status: Record<string, number> = {};
  let errors = 0;
  try {
    for (let pass = 0; pass < passes; pass += 1) {
      for (let i = 0; i < keys.length; i += WARM_CONCURRENCY) {
        const batch = keys.slice(i, i + WARM_CONCURRENCY).map(async (key) => {
          const res = await pool.request({
            method: 'POST',
            path: inPath ? keyedPath(spec.path, key) : spec.path,
            headers: { 'content-type': 'application/json', 'idempotency-key': inPath ? H2_KEY_HEADER_VALUE : key },
            body: spec.body,
          });
          await res.body.dump();
          return res.statusCode;
        });
        for (const s of await Promise.allSettled(batch)) {
          if (s.status === 'fulfilled') status[s.value] = (status[s.value] ?? 0) + 1;
          else errors += 1;
        }
      }
    }
  } finally {
    await pool.close();
  }
  return { status, errors };
}

interface LoadRun {
  readonly durationS: number;
  readonly responses: number;
  readonly status: Record<string, number>;
  readonly non2xx: number;
  readonly errors: number;
  readonly timeouts: number;
  readonly latencyMs: LatencySummary;
}

/** One run of the chosen generator; `keyPrefix` as keySequence() takes it. */
async function loadRun(generator: LoadGenerator, spec: CannonSpec, durationS: number, keyPrefix: string): Promise<LoadRun> {
  const base = { origin: spec.origin, path: spec.path, connections: spec.connections, body: spec.body, durationS };
  if (spec.protocol === 'h2') {
    const h2 = spec.h2 ?? { connections: spec.connections, streams: 1 };
    return runH2load({ ...base, ...h2, keys: spec.keys, keyPrefix });
  }
  if (generator === 'wrk') return runWrk({ ...base, keys: spec.keys, keyPrefix });
  const latency = latencyRecorder();
  const run = await runCannon({ ...base, nextKey: keySequence(spec.keys, keyPrefix), latency });
  let non2xx = 0;
  for (const [code, count] of Object.entries(run.status)) if (code[0] !== '2') non2xx += count;
  return { ...run, non2xx, latencyMs: latency.summary() };
}

function generatorFor(spec: CannonSpec): LoadGenerator {
  if (spec.protocol === 'h2') return 'h2load';
  if (spec.generator !== undefined) return spec.generator;
  const { generator, note } = chooseGenerator(process.env);
  if (note !== null) process.stderr.write(`load: ${note}\n`);
  return generator;
}

async function cannon(spec: CannonSpec): Promise<CannonResult> {
  const generator = generatorFor(spec);
  // autocannon over TLS: the run's self-signed certificate is not verified (lib/certificate.ts).
  if (generator === 'autocannon' && spec.origin.startsWith('https:')) process.env['NODE_TLS_REJECT_UNAUTHORIZED'] = '0';
  const fixed = spec.keys.kind === 'fixed' ? `${spec.keyPrefix}-k` : null;
  const warm = spec.keys.kind === 'fixed' ? await warmKeys(spec, fixedKeys(spec.keys.count, fixed ?? ''), spec.keys.warmPasses) : null;
  if (spec.warmupS > 0) await loadRun(generator, spec, spec.warmupS, fixed ?? `${spec.keyPrefix}-w`);
  const before = await upstreamCount(spec.statsUrl);
  const run = await loadRun(generator, spec, spec.durationS, fixed ?? `${spec.keyPrefix}-m`);
  // No response at all: the run failed (the harness leaves it out of the medians and of its neighbours' baseline).
  if (run.responses === 0) throw new Error(`no response in ${spec.durationS} s from ${spec.origin}${spec.path}`);
  const after = await upstreamCount(spec.statsUrl);
  return {
    generator,
    rps: run.durationS > 0 ? Math.round(run.responses / run.durationS) : 0,
    responses: run.responses,
    durationS: run.durationS,
    latencyMs: run.latencyMs,
    status: run.status,
    non2xx: run.non2xx,
    errors: run.errors,
    timeouts: run.timeouts,
    upstreamCalls: before === null || after === null ? null : after - before,
    warm,
  };
}

async function main(): Promise<void> {
  const raw = process.argv[2];
  if (raw === undefined) throw new Error('usage: load.js <LoadSpec JSON>');
  const spec = JSON.parse(raw) as LoadSpec;
  if (spec.mode === 'rss') {
    await holdOpenConnections(spec);
    return;
  }
  const result = await cannon(spec);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

if (isEntry(import.meta.url)) {
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`load: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}
