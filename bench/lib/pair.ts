// The pass-through route side by side with the baseline: both servers loaded
// at the same moment, each by its own load generator (PAIR_CONNECTIONS
// connections each, both generators on the load CPU, both servers on the
// server CPU). Whatever the machine does during a round, it does to both, so
// the pair is free of the drift between consecutive runs that the
// alternating rows are exposed to (bench/README.md, history: 2026-12-01 02:16).
//
// Both sides are started for the pair (run.ts), each in front of an upstream
// of its own (the same program, on the same CPU): the two servers have the
// same history, and the upstream's work per request is read for each side
// too (what a proxy sends upstream is part of its cost to the shared core).
//
// Three readings per round: the ratio of the request rates; the ratio of the
// CPU time each server used per request (the nanoseconds its threads ran,
// from /proc/<pid>/task/*/schedstat — /proc/<pid>/stat's 10 ms ticks were
// about 1 % of a reading —, over the middle of the measured window, read for
// all four processes at the same instants); and the same ratio with each
// side's upstream added, the cost per request to the core that the
// alternating rows divide among themselves.
// Under contention the scheduler need not share the CPU evenly between the
// two sides, so the rates can lean either way by several per cent; the CPU
// per request is each one's own cost. The pass-through target is judged on
// the alternating row; the pair is the cross-check.
import type { ServerHandle } from './children.js';
import { REQUEST_BODY, type BenchContext } from './context.js';
import { CLOCK_TICKS_PER_S, cpuNsBetween, readCpuNs, readCpuTicks, type CpuNs } from './proc.js';
import { BASELINE, SCENARIOS } from './scenarios.js';
import { median } from './summary.js';
import type { CannonResult, CannonSpec, KeyPlan } from './types.js';

export const PAIR_CONNECTIONS = 25;
/** Seconds into the measured run before the CPU window opens, and before its end that it closes. */
const CPU_MARGIN_S = 1.5;

export interface PairRound {
  readonly round: number;
  readonly baseline: CannonResult | null;
  readonly proxy: CannonResult | null;
  readonly ratio: number | null; // proxy req/s over baseline req/s
  readonly baselineCpuUs: number | null; // CPU µs per request over the window
  readonly proxyCpuUs: number | null;
  readonly cpuRatio: number | null; // proxy CPU per request over the baseline's
  readonly baselineUpstreamCpuUs: number | null; // the baseline's upstream, µs per request
  readonly proxyUpstreamCpuUs: number | null;
  readonly totalCpuRatio: number | null; // (proxy + its upstream) over (baseline + its upstream)
  readonly error: string | null;
}

/** A server in the pair and the upstream that serves it alone during the pair. */
export interface PairSide {
  readonly server: ServerHandle;
  readonly upstream: ServerHandle;
  /** Other processes that work for this side alone (the traced proxy's span sink): counted with its upstream. */
  readonly others?: readonly ServerHandle[];
}

/** What the two sides are sent: the pass-through pair, or the tracing pairs (tracing off against on). */
export interface PairShape {
  readonly id: string;
  /** What each side is, for the report: [first, second]; ratios are second over first. */
  readonly labels: readonly [string, string];
  readonly paths: readonly [string, string];
  readonly keys: KeyPlan;
  readonly title: string;
}

export interface PairResult {
  readonly shape: Omit<PairShape, 'keys'>;
  readonly connections: number;
  readonly rounds: readonly PairRound[];
  readonly ratio: number | null; // median of the rounds' rate ratios
  readonly cpuRatio: number | null; // median of the rounds' CPU-per-request ratios
  readonly totalCpuRatio: number | null; // median, each side with its upstream
  /** The tracing pairs: spans the traced side logged as lost during this pair (lib/lost-spans.ts); null when its log could not be read. */
  readonly spansLost?: number | null;
  /** Seconds both sides were loaded, uncounted, before the counted rounds (0: none); absent in results written before it was recorded. */
  readonly primeS?: number;
}

const PASS = SCENARIOS.find((s) => s.id === 'pass')!;

export const PASS_PAIR: PairShape = {
  id: 'pair',
  labels: ['baseline', 'proxy pass-through'],
  paths: [BASELINE.path, PASS.path],
  keys: { kind: 'unique' },
  title: "Pass-through side by side: the baseline and the proxy's pass-through route",
};
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const round3 = (x: number): number => Number(x.toFixed(3));

/** One process's CPU time: its threads' nanoseconds (null when they could not all be read) and its ticks. */
interface CpuReading {
  readonly ticks: number;
  readonly ns: CpuNs | null;
}

/** The CPU time of each process, read one after the other; null if any is gone. */
function readAll(pids: readonly number[]): CpuReading[] | null {
  const out: CpuReading[] = [];
  for (const pid of pids) {
    const ns = readCpuNs(pid);
    const ticks = readCpuTicks(pid);
    if (ticks === null) return null;
    out.push({ ticks, ns });
  }
  return out;
}

/** Seconds of CPU each process used between two readings: from its threads' nanoseconds, or its ticks when a thread came or went. */
function cpuSeconds(before: readonly CpuReading[], after: readonly CpuReading[]): number[] {
  return after.map((a, i) => {
    const b = before[i]!;
    const ns = cpuNsBetween(b.ns, a.ns);
    return ns === null ? (a.ticks - b.ticks) / CLOCK_TICKS_PER_S : ns / 1e9;
  });
}

/** `primeS`: the uncounted first round's seconds (BENCH_PRIME unless the caller knows its sides need longer). */
export async function measurePair(ctx: BenchContext, baselineSide: PairSide, proxySide: PairSide, shape: PairShape = PASS_PAIR, primeS = ctx.opts.primeS): Promise<PairResult> {
  const baseline = baselineSide.server;
  const proxy = proxySide.server;
  // baseline, proxy, the baseline's upstream, the proxy's upstream; then the others of each side
  const othersA = (baselineSide.others ?? []).map((o) => o.pid);
  const othersB = (proxySide.others ?? []).map((o) => o.pid);
  const pids = [baseline.pid, proxy.pid, baselineSide.upstream.pid, proxySide.upstream.pid, ...othersA, ...othersB];
  const rounds: PairRound[] = [];
  const { durationS, warmupS, reps } = ctx.opts;
  // Round 0 primes both (BENCH_PRIME seconds, not counted), as the repetitions do.
  for (let round = primeS > 0 ? 0 : 1; round <= reps && !ctx.interrupted(); round += 1) {
    const priming = round === 0;
    const spec = (origin: string, path: string, id: string): CannonSpec => ({
      mode: 'cannon',
      origin,
      path,
      connections: PAIR_CONNECTIONS,
      durationS: priming ? primeS : durationS,
      warmupS: priming ? 0 : warmupS,
      keys: shape.keys,
      // Fixed keys (replays) are each side's own, warmed through it: the same keys in every round.
      keyPrefix: shape.keys.kind === 'fixed' ? `${ctx.runId}-${shape.id}-${id}` : `${ctx.runId}-${shape.id}-${id}-r${round}`,
      body: REQUEST_BODY,
      statsUrl: null, // the rates come from the load generators
    });
    // The two load generators start one after the other; which goes first alternates by round, so that
    // neither side always has the head start.
    const loadA = (): Promise<CannonResult> => ctx.load.cannon(spec(baseline.url, shape.paths[0], 'a'));
    const loadB = (): Promise<CannonResult> => ctx.load.cannon(spec(proxy.url, shape.paths[1], 'b'));
    let sideA: Promise<CannonResult>;
    let sideB: Promise<CannonResult>;
    if (round % 2 === 1) {
      sideA = loadA();
      sideB = loadB();
    } else {
      sideB = loadB();
      sideA = loadA();
    }
    const both = Promise.allSettled([sideA, sideB]);
    // CPU over the middle of the measured run: read all four at the same instants.
    const windowS = durationS - 2 * CPU_MARGIN_S;
    let cpu: { d: number[]; s: number } | null = null;
    if (!priming && windowS >= 2) {
      await sleep((warmupS + CPU_MARGIN_S) * 1000);
      const t0 = performance.now();
      const before = readAll(pids);
      await sleep(windowS * 1000);
      const after = readAll(pids);
      const s = (performance.now() - t0) / 1000;
      if (before !== null && after !== null) cpu = { d: cpuSeconds(before, after), s };
    }
    const [b, p] = await both;
    const result = (x: PromiseSettledResult<CannonResult>): CannonResult | null => (x.status === 'fulfilled' ? x.value : null);
    const failed = [b, p].filter((x): x is PromiseRejectedResult => x.status === 'rejected').map((x) => String((x.reason as Error)?.message ?? x.reason));
    const base = result(b);
    const pass = result(p);
    const bad = [base, pass].some((r) => r !== null && r.errors + r.non2xx > 0);
    const error = failed.length > 0 ? failed.join('; ') : bad ? 'errors or non-2xx answers during the round' : null;
    const ok = error === null && base !== null && pass !== null && base.rps > 0 && pass.rps > 0;
    const ratio = ok ? round3(pass.rps / base.rps) : null;
    // µs of CPU per request over the window: [baseline, proxy, baseline's upstream, proxy's upstream]
    // Each upstream serves its own side only: its requests are its server's.
    const rates = ok ? [base.rps, pass.rps, base.rps, pass.rps, ...othersA.map(() => base.rps), ...othersB.map(() => pass.rps)] : null;
    const us = rates !== null && cpu !== null ? cpu.d.map((t, i) => (t * 1e6) / (rates[i]! * cpu!.s)) : null;
    const usOf = (i: number): number | null => (us === null ? null : Math.round(us[i]!));
    const baselineCpuUs = usOf(0);
    const proxyCpuUs = usOf(1);
    // Each side's upstream and its others together: what else the side makes the shared core do per request.
    const sum = (from: number, n: number): number => us!.slice(from, from + n).reduce((a, b) => a + b, 0);
    if (us !== null) {
      us[2] = us[2]! + sum(4, othersA.length);
      us[3] = us[3]! + sum(4 + othersA.length, othersB.length);
    }
    const baselineUpstreamCpuUs = usOf(2);
    const proxyUpstreamCpuUs = usOf(3);
    const cpuRatio = us !== null && us[0]! > 0 ? round3(us[1]! / us[0]!) : null;
    const totalCpuRatio = us !== null && us[0]! + us[2]! > 0 ? round3((us[1]! + us[3]!) / (us[0]! + us[2]!)) : null;
    if (!priming) rounds.push({ round, baseline: base, proxy: pass, ratio, baselineCpuUs, proxyCpuUs, cpuRatio, baselineUpstreamCpuUs, proxyUpstreamCpuUs, totalCpuRatio, error });
    const label = priming ? `priming ${shape.id}` : `${shape.id} ${round}/${reps}`;
    const cpuText = cpuRatio === null ? '' : `; CPU per request ${baselineCpuUs} / ${proxyCpuUs} µs, ${cpuRatio}×; with their upstreams ${totalCpuRatio}×`;
    ctx.log(`${label}: ${shape.labels[0]} ${base?.rps ?? '—'} req/s, ${shape.labels[1]} ${pass?.rps ?? '—'} req/s${ratio === null ? '' : `, ${ratio}×`}${cpuText}${error === null ? '' : ` — ${error}`}${priming ? ' (not counted)' : ''}`);
  }
  const med = (xs: (number | null)[]): number | null => {
    const m = median(xs.filter((x): x is number => x !== null));
    return m === null ? null : round3(m);
  };
  return { shape: described(shape), connections: PAIR_CONNECTIONS, rounds, ratio: med(rounds.map((r) => r.ratio)), cpuRatio: med(rounds.map((r) => r.cpuRatio)), totalCpuRatio: med(rounds.map((r) => r.totalCpuRatio)), primeS };
}

/** A shape as the report and the results file describe it (its key plan left out). */
const described = ({ keys: _keys, ...rest }: PairShape): PairResult['shape'] => rest;

/** The pair's result when it could not run at all: one round carrying the reason. */
export function failedPair(error: string, shape: PairShape = PASS_PAIR): PairResult {
  const none = { baseline: null, proxy: null, ratio: null, baselineCpuUs: null, proxyCpuUs: null, cpuRatio: null, baselineUpstreamCpuUs: null, proxyUpstreamCpuUs: null, totalCpuRatio: null };
  return { shape: described(shape), connections: PAIR_CONNECTIONS, rounds: [{ round: 1, ...none, error }], ratio: null, cpuRatio: null, totalCpuRatio: null };
}
