// The pass-through route side by side with the baseline: both servers loaded
// at the same moment, each by its own load generator (PAIR_CONNECTIONS
// connections each, both generators on the load CPU, both servers on the
// server CPU with the upstream). Whatever the machine does during a round, it
// does to both, so the pair is free of the drift between consecutive runs
// that the alternating rows are exposed to (bench/README.md, 2026-12-01).
//
// Two readings per round: the ratio of the request rates, and the ratio of
// the CPU time each server used per request (from /proc/<pid>/stat, over the
// middle of the measured window, read for both at the same instants). Under
// contention the scheduler need not share the CPU evenly between the two, so
// the rates can lean either way by several per cent; the CPU per request is
// each server's own cost. The pass-through target is judged on the
// alternating row; the pair is the cross-check.
import type { ServerHandle } from './children.js';
import { REQUEST_BODY, type BenchContext } from './context.js';
import { CLOCK_TICKS_PER_S, readCpuTicks } from './proc.js';
import { BASELINE, SCENARIOS } from './scenarios.js';
import { median } from './summary.js';
import type { CannonResult, CannonSpec } from './types.js';

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
  readonly error: string | null;
}

export interface PairResult {
  readonly connections: number;
  readonly rounds: readonly PairRound[];
  readonly ratio: number | null; // median of the rounds' rate ratios
  readonly cpuRatio: number | null; // median of the rounds' CPU-per-request ratios
}

const PASS = SCENARIOS.find((s) => s.id === 'pass')!;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const round3 = (x: number): number => Number(x.toFixed(3));

export async function measurePair(ctx: BenchContext, baseline: ServerHandle, proxy: ServerHandle): Promise<PairResult> {
  const rounds: PairRound[] = [];
  const { durationS, warmupS, primeS, reps } = ctx.opts;
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
      keys: { kind: 'unique' },
      keyPrefix: `${ctx.runId}-pair-${id}-r${round}`,
      body: REQUEST_BODY,
      statsUrl: null, // the upstream's counter cannot tell the two apart
    });
    const both = Promise.allSettled([
      ctx.load.cannon(spec(baseline.url, BASELINE.path, 'baseline')),
      ctx.load.cannon(spec(proxy.url, PASS.path, 'pass')),
    ]);
    // CPU over the middle of the measured run: read both servers at the same instants.
    const windowS = durationS - 2 * CPU_MARGIN_S;
    let ticks: { b: number; p: number; s: number } | null = null;
    if (!priming && windowS >= 2) {
      await sleep((warmupS + CPU_MARGIN_S) * 1000);
      const b0 = readCpuTicks(baseline.pid);
      const p0 = readCpuTicks(proxy.pid);
      const t0 = performance.now();
      await sleep(windowS * 1000);
      const b1 = readCpuTicks(baseline.pid);
      const p1 = readCpuTicks(proxy.pid);
      const s = (performance.now() - t0) / 1000;
      if (b0 !== null && p0 !== null && b1 !== null && p1 !== null) ticks = { b: b1 - b0, p: p1 - p0, s };
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
    const perRequestUs = (t: number, rps: number): number => ((t / CLOCK_TICKS_PER_S) * 1e6) / (rps * ticks!.s);
    const baselineCpuUs = ok && ticks !== null ? Math.round(perRequestUs(ticks.b, base.rps)) : null;
    const proxyCpuUs = ok && ticks !== null ? Math.round(perRequestUs(ticks.p, pass.rps)) : null;
    const cpuRatio = ok && ticks !== null && ticks.b > 0 ? round3(perRequestUs(ticks.p, pass.rps) / perRequestUs(ticks.b, base.rps)) : null;
    if (!priming) rounds.push({ round, baseline: base, proxy: pass, ratio, baselineCpuUs, proxyCpuUs, cpuRatio, error });
    const label = priming ? 'priming pair' : `pair ${round}/${reps}`;
    const cpu = cpuRatio === null ? '' : `; CPU per request ${baselineCpuUs} / ${proxyCpuUs} µs, ${cpuRatio}×`;
    ctx.log(`${label}: baseline ${base?.rps ?? '—'} req/s, proxy pass-through ${pass?.rps ?? '—'} req/s${ratio === null ? '' : `, ${ratio}×`}${cpu}${error === null ? '' : ` — ${error}`}${priming ? ' (not counted)' : ''}`);
  }
  const med = (xs: (number | null)[]): number | null => {
    const m = median(xs.filter((x): x is number => x !== null));
    return m === null ? null : round3(m);
  };
  return { connections: PAIR_CONNECTIONS, rounds, ratio: med(rounds.map((r) => r.ratio)), cpuRatio: med(rounds.map((r) => r.cpuRatio)) };
}
