// The pass-through route side by side with the baseline: both servers loaded
// at the same moment, each by its own load generator (PAIR_CONNECTIONS
// connections each, both generators on the load CPU, both servers on the
// server CPU with the upstream). Whatever the machine does during a round, it
// does to both, so the ratio of their request rates is the ratio of their
// costs per request, free of the drift between consecutive runs that the
// alternating rows are exposed to (bench/README.md, 2026-12-01).
import type { ServerHandle } from './children.js';
import { REQUEST_BODY, type BenchContext } from './context.js';
import { BASELINE, SCENARIOS } from './scenarios.js';
import { median } from './summary.js';
import type { CannonResult, CannonSpec } from './types.js';

export const PAIR_CONNECTIONS = 25;
export const PAIR_TARGET = 0.95; // the pass-through target (BENCH.md), judged here on the side-by-side ratio too

export interface PairRound {
  readonly round: number;
  readonly baseline: CannonResult | null;
  readonly proxy: CannonResult | null;
  readonly ratio: number | null;
  readonly error: string | null;
}

export interface PairResult {
  readonly connections: number;
  readonly rounds: readonly PairRound[];
  readonly ratio: number | null; // median of the rounds' ratios
  readonly met: boolean | null;
}

const PASS = SCENARIOS.find((s) => s.id === 'pass')!;

export async function measurePair(ctx: BenchContext, baseline: ServerHandle, proxy: ServerHandle): Promise<PairResult> {
  const rounds: PairRound[] = [];
  // Round 0 primes both (BENCH_PRIME seconds, not counted), as the repetitions do.
  for (let round = ctx.opts.primeS > 0 ? 0 : 1; round <= ctx.opts.reps && !ctx.interrupted(); round += 1) {
    const priming = round === 0;
    const spec = (origin: string, path: string, id: string): CannonSpec => ({
      mode: 'cannon',
      origin,
      path,
      connections: PAIR_CONNECTIONS,
      durationS: priming ? ctx.opts.primeS : ctx.opts.durationS,
      warmupS: priming ? 0 : ctx.opts.warmupS,
      keys: { kind: 'unique' },
      keyPrefix: `${ctx.runId}-pair-${id}-r${round}`,
      body: REQUEST_BODY,
      statsUrl: null, // the upstream's counter cannot tell the two apart
    });
    const [b, p] = await Promise.allSettled([
      ctx.load.cannon(spec(baseline.url, BASELINE.path, 'baseline')),
      ctx.load.cannon(spec(proxy.url, PASS.path, 'pass')),
    ]);
    const result = (s: PromiseSettledResult<CannonResult>): CannonResult | null => (s.status === 'fulfilled' ? s.value : null);
    const failed = [b, p].filter((s): s is PromiseRejectedResult => s.status === 'rejected').map((s) => String((s.reason as Error)?.message ?? s.reason));
    const base = result(b);
    const pass = result(p);
    const bad = [base, pass].some((r) => r !== null && r.errors + r.non2xx > 0);
    const error = failed.length > 0 ? failed.join('; ') : bad ? 'errors or non-2xx answers during the round' : null;
    const ratio = error === null && base !== null && pass !== null && base.rps > 0 ? Number((pass.rps / base.rps).toFixed(3)) : null;
    if (!priming) rounds.push({ round, baseline: base, proxy: pass, ratio, error });
    const label = priming ? 'priming pair' : `pair ${round}/${ctx.opts.reps}`;
    ctx.log(`${label}: baseline ${base?.rps ?? '—'} req/s, proxy pass-through ${pass?.rps ?? '—'} req/s${ratio === null ? '' : `, ${ratio}×`}${error === null ? '' : ` — ${error}`}${priming ? ' (not counted)' : ''}`);
  }
  const ratios = rounds.flatMap((r) => (r.ratio === null ? [] : [r.ratio]));
  const m = median(ratios);
  const ratio = m === null ? null : Number(m.toFixed(3));
  return { connections: PAIR_CONNECTIONS, rounds, ratio, met: ratio === null ? null : ratio >= PAIR_TARGET };
}
