// From the raw runs to one row per scenario: medians over repetitions, and the
// ratio to the baseline runs on either side of each product run (median of
// those per-run ratios), judged against the scenario's goal.
import { BASELINES, baselineOf, type Goal, type Scenario } from './scenarios.js';
import type { CannonResult } from './types.js';

export interface RunRecord {
  readonly scenario: string;
  readonly rep: number;
  readonly connections: number;
  readonly seq: number; // position in the repetition (see plan.ts); 0 with rep 0 for "not run"
  readonly result: CannonResult | null;
  readonly error: string | null;
}

export interface SummaryRow {
  readonly id: string;
  readonly title: string;
  readonly connections: number;
  readonly runs: number;
  readonly rps: number | null;
  readonly ratio: number | null;
  readonly p50: number | null;
  readonly p99: number | null;
  readonly non2xx: number;
  readonly errors: number;
  readonly status: Readonly<Record<string, number>>;
  readonly upstreamPerResponse: number | null;
  readonly goal: Goal | null;
  readonly met: boolean | null;
  readonly error: string | null;
}

export function median(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

function ok(runs: readonly RunRecord[], id: string): (RunRecord & { result: CannonResult })[] {
  return runs.filter((r): r is RunRecord & { result: CannonResult } => r.scenario === id && r.result !== null);
}

/** The baseline's req/s around one product run: the mean of the runs of its baseline just before and just after it. */
function baselineRps(runs: readonly RunRecord[], id: string, product: RunRecord): number | null {
  const vals = ok(runs, id)
    .filter((r) => r.rep === product.rep && Math.abs(r.seq - product.seq) === 1)
    .map((r) => r.result.rps);
  return vals.length === 0 ? null : vals.reduce((a, b) => a + b, 0) / vals.length;
}

function judge(goal: Goal | null, ratio: number | null, p50: number | null): boolean | null {
  if (goal === null) return null;
  if (goal.kind === 'ratio-min') return ratio === null ? null : ratio >= goal.value;
  return p50 === null ? null : p50 <= goal.ms;
}

export function summarize(scenario: Scenario, runs: readonly RunRecord[]): SummaryRow {
  const good = ok(runs, scenario.id);
  const failed = runs.filter((r) => r.scenario === scenario.id && r.error !== null);
  const isBaseline = BASELINES.some((b) => b.id === scenario.id);
  const baselineId = baselineOf(scenario).id;
  const ratios: number[] = [];
  if (!isBaseline) {
    for (const r of good) {
      const base = baselineRps(runs, baselineId, r);
      if (base !== null && base > 0) ratios.push(r.result.rps / base);
    }
  }
  const status: Record<string, number> = {};
  let non2xx = 0;
  let errors = 0;
  let responses = 0;
  let upstream = 0;
  let upstreamKnown = good.length > 0;
  for (const r of good) {
    for (const [code, n] of Object.entries(r.result.status)) status[code] = (status[code] ?? 0) + n;
    non2xx += r.result.non2xx;
    errors += r.result.errors;
    responses += r.result.responses;
    if (r.result.upstreamCalls === null) upstreamKnown = false;
    else upstream += r.result.upstreamCalls;
  }
  const round = (x: number | null, digits: number): number | null => (x === null ? null : Number(x.toFixed(digits)));
  const p50 = median(good.map((r) => r.result.latencyMs.p50));
  const ratio = isBaseline ? (good.length > 0 ? 1 : null) : round(median(ratios), 3);
  return {
    id: scenario.id,
    title: scenario.title,
    connections: scenario.connections,
    runs: good.length,
    rps: round(median(good.map((r) => r.result.rps)), 0),
    ratio,
    p50,
    p99: median(good.map((r) => r.result.latencyMs.p99)),
    non2xx,
    errors,
    status,
    upstreamPerResponse: upstreamKnown && responses > 0 ? round(upstream / responses, 3) : null,
    goal: scenario.goal,
    met: judge(scenario.goal, ratio, p50),
    error: failed.length > 0 ? (failed[0]!.error ?? null) : null,
  };
}
