// `npm run bench [-- --only baseline,newkey]`: starts the upstream, the bare
// baseline and the proxy (through its CLI) on loopback, servers pinned to
// CPU 0 and each load generator to CPU 1, runs every scenario BENCH_REPS
// times interleaved with the baseline, prints one markdown table (medians,
// ratios to the baseline runs around each product run) and writes the raw
// JSON to bench/results/<timestamp>.json. See bench/README.md.
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Children, type ServerHandle } from './lib/children.js';
import { claimDatabases, measureClaim, type ClaimResult } from './lib/claim.js';
import { logOffset, spansLostSince } from './lib/lost-spans.js';
import { failedPair, measurePair, type PairResult, type PairShape, type PairSide } from './lib/pair.js';
import { isEntry } from './lib/cli-args.js';
import type { BenchContext } from './lib/context.js';
import { loadRunner } from './lib/load-runner.js';
import { runRepetitions } from './lib/measure.js';
import { parseRunOptions, type RunOptions } from './lib/options.js';
import { commandLine, headerText, writeResults, type RunFacts } from './lib/output.js';
import { dropDatabase, durabilitySettings } from './lib/pg.js';
import { detectPinning } from './lib/pin.js';
import { makePlan } from './lib/plan.js';
import { readMemory, type MemoryFigures } from './lib/proc.js';
import { renderReport } from './lib/report.js';
import { measureRssPair, rssValid, type RssMeasure } from './lib/rss.js';
import { ALIASES, allNames, REPLAY_KEYS } from './lib/scenarios.js';
import { bringUp, otherDatabase, tracedEnv, type Fleet } from './lib/servers-up.js';
import { startServices, type Services } from './lib/services.js';
import { LOAD_CPU, nodeFlagsOf, startBaseline, startProxy, startUpstream } from './lib/servers.js';
import { summarize, type RunRecord } from './lib/summary.js';

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  const parsed = parseRunOptions(argv, process.env);
  if (parsed.listOnly) {
    process.stdout.write(`scenarios: ${allNames().join(', ')}\naliases: ${Object.keys(ALIASES).join(', ')}\n`);
    return 0;
  }
  const started = new Date();
  const loadAtStart = loadavg()[0]!;
  const distRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
  const tmp = mkdtempSync(join(tmpdir(), 'idem-bench-'));
  const pin = detectPinning(parsed.noPin);
  const children = new Children(join(distRoot, 'bench', 'guard.js'));
  const log = (msg: string): void => void process.stderr.write(`[bench] ${msg}\n`);
  process.on('exit', () => children.killAll());
  let services: Services;
  try {
    services = await startServices({ opts: parsed, pin, children, tmp, log });
  } catch (err) {
    await children.stopAll();
    throw err;
  }
  // As they ran: after a fallback to the machine's servers, the run drops its databases there.
  const opts: RunOptions = {
    ...parsed,
    adminUrl: services.adminUrl,
    redisUrl: services.redisUrl,
    ownPostgres: services.ownPostgres,
    ownRedis: services.ownRedis,
  };
  let interrupted = false;
  const ctx: BenchContext = {
    opts,
    pin,
    children,
    load: loadRunner(children, pin.prefix(LOAD_CPU), join(distRoot, 'bench', 'load.js'), opts.load),
    runId: `b${started.getTime().toString(36)}`,
    distRoot,
    projectRoot: process.env['BENCH_PROJECT_ROOT'] ?? process.cwd(),
    tmp,
    log,
    interrupted: () => interrupted,
  };
  const cleanUp = async (): Promise<void> => {
    await children.stopAll(); // the servers, and PostgreSQL and Redis of the run's own
    if (!opts.keepDb && !opts.ownPostgres) {
      for (const db of [opts.dbName, otherDatabase(opts), ...claimDatabases(opts)]) await dropDatabase(opts.adminUrl, db).catch(() => undefined);
    }
    await services.stop(opts.keepDb);
  };
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      interrupted = true;
      log(`${sig}: stopping every child process, dropping the benchmark databases`);
      void cleanUp()
        .then(() => rmSync(tmp, { recursive: true, force: true }))
        .finally(() => process.exit(sig === 'SIGINT' ? 130 : 143));
    });
  }
  log(`pinning: ${pin.enabled ? pin.reason : `off — ${pin.reason}`}`);
  log(services.description);
  log(`load generator: ${opts.load}${opts.loadNote === null ? '' : ` — ${opts.loadNote}`}`);
  log(`${opts.reps} repetitions × ${opts.durationS} s (+${opts.warmupS} s warm-up) per scenario; logs in ${tmp}`);

  const plan = makePlan(opts);
  const runs: RunRecord[] = [];
  const memory: Record<string, MemoryFigures | null> = {};
  let rss: RssMeasure[] = [];
  let claim: ClaimResult | null = null;
  let pair: PairResult | null = null;
  let tracePairs: PairResult[] = [];
  let buildPairs: PairResult[] = [];
  let fleet: Fleet | null = null;
  const settings = await durabilitySettings(opts.adminUrl).catch(() => null);
  try {
    fleet = await bringUp(ctx, plan);
    for (const [id, why] of fleet.unavailable) {
      for (const s of plan.scenarios.filter((sc) => sc.server === id)) {
        runs.push({ scenario: s.id, rep: 0, seq: 0, connections: s.connections, result: null, error: `not run: ${id} did not start (${why.split('\n')[0]})` });
      }
    }
    const upstream = fleet.servers.get('upstream')!;
    runs.push(...(await runRepetitions(ctx, plan, fleet.servers, `${upstream.url}/__stats`)));
    if (plan.pair && !interrupted) pair = await runPair(ctx, fleet.databaseUrl);
    if (plan.tracePairs.length > 0 && !interrupted) tracePairs = await runTracePairs(ctx, fleet.databaseUrl, plan.tracePairs);
    if (plan.buildPairs.length > 0 && !interrupted) buildPairs = await runBuildPairs(ctx, fleet.databaseUrl, fleet.otherDatabaseUrl, plan.buildPairs);
    for (const [id, s] of fleet.servers) memory[id] = readMemory(s.pid);
    for (const [id, s] of fleet.servers) if (id !== 'upstream') await s.stop();
    if (plan.rss && !interrupted) {
      const db = fleet.databaseUrl;
      const proxy = db === null ? (fleet.unavailable.get('proxy-pg') ?? 'no database') : () => startProxy(ctx, { name: 'proxy-rss', upstream: upstream.url, databaseUrl: db, redisUrl: opts.redisUrl });
      rss = await measureRssPair(ctx, proxy, () => startBaseline(ctx, upstream.url, 'baseline-rss'));
    }
    if (plan.claim && !interrupted) claim = await measureClaim(ctx, upstream.url);
  } finally {
    await cleanUp();
  }
  if (interrupted) return new Promise<number>(() => undefined); // the signal handler exits

  const otherNodeFlags = opts.other === null ? null : await nodeFlagsOf(opts.other);
  const facts: RunFacts = { started, command: commandLine(argv), loadAtStart, settings, services: services.description, commitProbe: fleet.commitProbe, otherNodeFlags };
  const rows = plan.scenarios.map((s) => summarize(s, runs));
  const skipped = [...fleet.unavailable].map(([id, why]) => `${id}: ${why.split('\n').slice(0, 6).join(' | ')}`);
  process.stdout.write(`\n${renderReport({ header: headerText(ctx, facts), rows, skipped, memory, rss, claim, pair, tracePairs, buildPairs })}`);
  const file = writeResults(ctx, facts, { unavailable: Object.fromEntries(fleet.unavailable), summary: rows, runs, memoryAfterLoad: memory, rss, claim, pair, tracePairs, buildPairs });
  log(`raw results: ${file}`);
  if (process.env['BENCH_KEEP_LOGS'] === '1') log(`server logs kept in ${tmp}`);
  else rmSync(tmp, { recursive: true, force: true });

  const failed = runs.some((r) => r.error !== null) || rss.some((m) => m.error !== null || !rssValid(m)) || (claim?.sizes.some((s) => s.error !== null) ?? false) || (pair?.rounds.some((r) => r.error !== null) ?? false) || [...tracePairs, ...buildPairs].some((p) => p.rounds.some((r) => r.error !== null));
  return failed ? 1 : 0;
}

type Start = (s: Promise<ServerHandle>) => Promise<ServerHandle>;

/**
 * Servers started for side-by-side pairs, measured, then stopped (all of them, also when one failed to start):
 * `sides` starts the two sides through `start`; a failure to start gives `failed(reason)`.
 */
async function withSides<T>(ctx: BenchContext, what: string, sides: (start: Start) => Promise<[PairSide, PairSide]>,
  measure: (a: PairSide, b: PairSide) => Promise<T>, failed: (error: string) => T): Promise<T> {
  const started: ServerHandle[] = [];
  const start: Start = async (s) => {
    const h = await s;
    started.push(h);
    return h;
  };
  try {
    let pair: [PairSide, PairSide];
    try {
      pair = await sides(start);
    } catch (err) {
      const error = `${what}'s servers did not start: ${err instanceof Error ? err.message : String(err)}`;
      ctx.log(error);
      return failed(error);
    }
    return await measure(...pair);
  } finally {
    for (const s of started.reverse()) await s.stop();
  }
}

/**
 * The side-by-side pair (lib/pair.ts): a baseline and a proxy started for it,
 * each in front of an upstream of its own, so that both sides have the same
 * history (a server's CPU per request moves with what it has served before:
 * bench/README.md, history: 2026-12-01 02:16), and stopped after it.
 */
async function runPair(ctx: BenchContext, databaseUrl: string | null): Promise<PairResult> {
  if (databaseUrl === null) return failedPair('no database for the pair\'s proxy');
  return withSides(ctx, 'the pair', async (start) => {
    const forBaseline = await start(startUpstream(ctx, 'upstream-pair-baseline'));
    const forProxy = await start(startUpstream(ctx, 'upstream-pair-proxy'));
    const baseline = await start(startBaseline(ctx, forBaseline.url, 'baseline-pair'));
    const proxy = await start(startProxy(ctx, { name: 'proxy-pair', upstream: forProxy.url, databaseUrl, redisUrl: null }));
    return [{ server: baseline, upstream: forBaseline }, { server: proxy, upstream: forProxy }];
  }, (a, b) => measurePair(ctx, a, b), (error) => failedPair(error));
}

/** Tracing off against on (lib/pair.ts): a new key per request, then replays of keys each side recorded. */
const TRACE_PAIRS: readonly PairShape[] = [
  { id: 'trace-pair-newkey', labels: ['tracing off', 'tracing on'], paths: ['/bench/newkey', '/bench/newkey'], keys: { kind: 'unique' },
    title: 'Tracing side by side, new key per request (PostgreSQL): the same proxy with tracing off and on' },
  { id: 'trace-pair-replay', labels: ['tracing off', 'tracing on'], paths: ['/bench/replay', '/bench/replay'], keys: { kind: 'fixed', count: REPLAY_KEYS, warmPasses: 1 },
    title: 'Tracing side by side, replay from PostgreSQL: the same proxy with tracing off and on' },
];

/** How the traced side of the pairs traces, for their titles: its sampler, its protocol, BENCH_TRACE_ENV's other settings. */
function tracedSetting(env: NodeJS.ProcessEnv, extra: Readonly<Record<string, string>>): string {
  const sampler = env['OTEL_TRACES_SAMPLER'] ?? 'always_on';
  const arg = env['OTEL_TRACES_SAMPLER_ARG'] ?? '';
  const sampling = sampler === 'always_on' ? 'every request sampled' : `sampler ${sampler}${arg === '' ? '' : ` ${arg}`}`;
  const more = Object.entries(extra).filter(([k]) => !k.startsWith('OTEL_TRACES_SAMPLER') && k !== 'OTEL_EXPORTER_OTLP_PROTOCOL');
  return ` (${sampling}, OTLP ${env['OTEL_EXPORTER_OTLP_PROTOCOL'] ?? 'http/protobuf'} to a sink${more.map(([k, v]) => `, ${k}=${v}`).join('')})`;
}

/**
 * The tracing pairs: two proxies on the run's database, one with tracing off and one exporting its
 * spans to a sink of its own (BENCH_OTEL_* and BENCH_TRACE_ENV say how), each in front of an upstream
 * of its own, started for the pairs and stopped after them. The sink's CPU is counted with the traced
 * side's upstream. The first pair primes the fresh proxies for BENCH_TRACE_PRIME seconds, not BENCH_PRIME's
 * 2: the traced one has more code for V8 to optimise, and its compiler threads, counted in its CPU, are busy
 * with it for the first 15-20 s of new-key load (bench/README.md, BENCH_TRACE_PRIME). A second pair runs on
 * the proxies already warm, primed for BENCH_PRIME.
 */
async function runTracePairs(ctx: BenchContext, databaseUrl: string | null, ids: readonly string[]): Promise<PairResult[]> {
  // The traced side's settings (its sink's address aside), for the titles.
  const setting = tracedSetting({ ...tracedEnv(''), ...ctx.opts.traceEnv }, ctx.opts.traceEnv);
  const shapes = TRACE_PAIRS.filter((s) => ids.includes(s.id)).map((s) => ({ ...s, title: s.title + setting }));
  if (databaseUrl === null) return shapes.map((s) => failedPair('no database for the tracing pair', s));
  return withSides(ctx, 'the tracing pair', async (start) => {
    const forOff = await start(startUpstream(ctx, 'upstream-trace-off'));
    const forOn = await start(startUpstream(ctx, 'upstream-trace-on'));
    const sink = await start(startUpstream(ctx, 'otlp-sink-pair'));
    const off = await start(startProxy(ctx, { name: 'proxy-trace-off', upstream: forOff.url, databaseUrl, redisUrl: null }));
    const on = await start(startProxy(ctx, { name: 'proxy-trace-on', upstream: forOn.url, databaseUrl, redisUrl: null, env: { ...tracedEnv(sink.url), ...ctx.opts.traceEnv } }));
    return [{ server: off, upstream: forOff }, { server: on, upstream: forOn, others: [sink] }];
  }, (a, b) => measureShapes(ctx, shapes, (shape, i) => withSpansLost([b], () => measurePair(ctx, a, b, shape, i === 0 ? ctx.opts.tracePrimeS : ctx.opts.primeS))),
  (error) => shapes.map((s) => failedPair(error, s)));
}

/** Each shape measured in turn on the same two sides (`i`: its place, 0 first), until the run is interrupted. */
async function measureShapes(ctx: BenchContext, shapes: readonly PairShape[], one: (shape: PairShape, i: number) => Promise<PairResult>): Promise<PairResult[]> {
  const out: PairResult[] = [];
  for (const [i, shape] of shapes.entries()) {
    if (ctx.interrupted()) break;
    out.push(await one(shape, i));
  }
  return out;
}

/** A pair's result with the spans its traced sides logged as lost while it ran (lib/lost-spans.ts); null when a log could not be read. */
async function withSpansLost(traced: readonly PairSide[], measure: () => Promise<PairResult>): Promise<PairResult> {
  const from = traced.map((s) => logOffset(s.server.logFile));
  const result = await measure();
  const lost = traced.map((s, i) => spansLostSince(s.server.logFile, from[i]!));
  return { ...result, spansLost: lost.includes(null) ? null : lost.reduce((a, b) => a! + b!, 0) };
}

/** BENCH_OTHER's build against this one (lib/pair.ts), tracing off on both unless BENCH_BUILD_TRACED=1: a new key per request, then replays of keys each side recorded. */
const BUILD_PAIRS: readonly PairShape[] = [
  { id: 'build-pair-newkey', labels: ['BENCH_OTHER build', 'this build'], paths: ['/bench/newkey', '/bench/newkey'], keys: { kind: 'unique' },
    title: 'Builds side by side, new key per request (PostgreSQL): BENCH_OTHER\'s build and this one' },
  { id: 'build-pair-replay', labels: ['BENCH_OTHER build', 'this build'], paths: ['/bench/replay', '/bench/replay'], keys: { kind: 'fixed', count: REPLAY_KEYS, warmPasses: 1 },
    title: 'Builds side by side, replay from PostgreSQL: BENCH_OTHER\'s build and this one' },
];

/**
 * The build pairs: BENCH_OTHER's build on a database of its own (its schema may be older or newer than this
 * build's) and this build on the run's, both on the same PostgreSQL server, each in front of an upstream of its
 * own, started for the pairs and stopped after them. Ratios are this build over BENCH_OTHER's: below 1×, this
 * build is the cheaper. Two builds judged in one run, free of the drift between runs that the alternating
 * *-other rows suffer (bench/README.md, build-pair).
 */
async function runBuildPairs(ctx: BenchContext, databaseUrl: string | null, otherUrl: string | null, ids: readonly string[]): Promise<PairResult[]> {
  const traced = ctx.opts.buildTraced;
  // BENCH_BUILD_TRACED=1: both sides traced as the tracing pairs' traced side is, each exporting to a sink of its own.
  const setting = traced ? `, both traced${tracedSetting({ ...tracedEnv(''), ...ctx.opts.traceEnv }, ctx.opts.traceEnv)} (each side's sink counted with its upstream)` : ', tracing off on both';
  const shapes = BUILD_PAIRS.filter((s) => ids.includes(s.id)).map((s) => ({ ...s, title: s.title + setting }));
  if (databaseUrl === null || otherUrl === null) return shapes.map((s) => failedPair(`no database for the build pair's ${databaseUrl === null ? 'proxy' : 'BENCH_OTHER build'}`, s));
  return withSides(ctx, 'the build pair', async (start) => {
    const forOther = await start(startUpstream(ctx, 'upstream-build-other'));
    const forThis = await start(startUpstream(ctx, 'upstream-build-this'));
    const sinks = traced ? [await start(startUpstream(ctx, 'otlp-sink-build-other')), await start(startUpstream(ctx, 'otlp-sink-build-this'))] : null;
    const env = (i: number): NodeJS.ProcessEnv | undefined => (sinks === null ? undefined : { ...tracedEnv(sinks[i]!.url), ...ctx.opts.traceEnv });
    const other = await start(startProxy(ctx, { name: 'proxy-build-other', upstream: forOther.url, databaseUrl: otherUrl, redisUrl: null, root: ctx.opts.other!, env: env(0) }));
    const self = await start(startProxy(ctx, { name: 'proxy-build-this', upstream: forThis.url, databaseUrl, redisUrl: null, env: env(1) }));
    return [{ server: other, upstream: forOther, others: sinks === null ? [] : [sinks[0]!] }, { server: self, upstream: forThis, others: sinks === null ? [] : [sinks[1]!] }];
  }, (a, b) => measureShapes(ctx, shapes, (shape) => (traced ? withSpansLost([a, b], () => measurePair(ctx, a, b, shape)) : measurePair(ctx, a, b, shape))),
  (error) => shapes.map((s) => failedPair(error, s)));
}

if (isEntry(import.meta.url)) {
  main().then(
    (code) => process.exit(code),
    (err: unknown) => {
      const detail = err instanceof Error ? (process.env['BENCH_DEBUG'] === '1' ? (err.stack ?? err.message) : err.message) : String(err);
      process.stderr.write(`[bench] ${detail}\n`);
      process.exit(1);
    },
  );
}
