// Several runs of one pair pooled (bench/pairs-summary.ts): the mean of the
// runs' medians and how far it can be trusted. One run's median moves by
// about ±3 % on a two-core machine (bench/README.md, Side by side), so a
// target a few per cent wide is judged on several runs: met when the mean's
// one-sided 95 % upper bound is at or under the limit, missed when its lower
// bound is over it, and not decided by those runs otherwise.

/** The tracing target: at most 5 % of throughput, so the traced proxy's CPU per request at most 1/0.95 of the untraced one's. */
export const TRACING_CPU_LIMIT = 1 / 0.95;

/**
 * Student's t, one-sided 95 % (the 0.95 quantile), for 1 to 30 degrees of freedom: the standard table's
 * values. Past 30, the value for 30 (slightly wider than the true quantile, so a bound errs towards
 * "not decided").
 */
const T95 = [
  6.314, 2.92, 2.353, 2.132, 2.015, 1.943, 1.895, 1.86, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
  1.746, 1.74, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697,
];

export function t95(df: number): number {
  if (!Number.isInteger(df) || df < 1) throw new Error(`degrees of freedom: a whole number above 0, not ${df}`);
  return T95[Math.min(df, T95.length) - 1]!;
}

export interface Pooled {
  readonly n: number;
  readonly mean: number;
  /** The runs' sample standard deviation (n − 1); null for one run. */
  readonly sd: number | null;
  /** The mean's one-sided 95 % bounds; null for one run (nothing to say how far the mean can move). */
  readonly lower: number | null;
  readonly upper: number | null;
}

export function pool(values: readonly number[]): Pooled {
  const n = values.length;
  if (n === 0) throw new Error('no runs to pool');
  for (const v of values) if (!Number.isFinite(v)) throw new Error(`not a ratio: ${v}`);
  const mean = values.reduce((s, v) => s + v, 0) / n;
  if (n === 1) return { n, mean, sd: null, lower: null, upper: null };
  const sd = Math.sqrt(values.reduce((s, v) => s + (v - mean) ** 2, 0) / (n - 1));
  const margin = t95(n - 1) * (sd / Math.sqrt(n));
  return { n, mean, sd, lower: mean - margin, upper: mean + margin };
}

export type Decision = 'met' | 'missed' | 'not decided';

/** Met: the mean's upper bound at or under `limit`; missed: its lower bound over it; else not decided (one run never decides). */
export function decide(p: Pooled, limit: number): Decision {
  if (p.upper === null || p.lower === null) return 'not decided';
  if (p.upper <= limit) return 'met';
  if (p.lower > limit) return 'missed';
  return 'not decided';
}
