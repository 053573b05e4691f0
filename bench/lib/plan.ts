// Which scenarios one invocation runs (from --only), in which order, and which
// servers that needs. One repetition alternates baseline and product at each
// connection count — B, P1, B, P2, …, Pn, B — so every product run sits
// between two baseline runs and is compared with their mean (bench/README.md,
// Method: baseline, product, baseline, product…).
import { wants, type RunOptions } from './options.js';
import { BASELINE, BASELINE_1C, OTHER_SCENARIOS, SCENARIOS, type Scenario, type ServerId } from './scenarios.js';

export interface Step {
  readonly scenario: Scenario;
  readonly seq: number; // position in the repetition; neighbours of a product step are baselines
}

export interface Plan {
  readonly steps: readonly Step[]; // one repetition
  readonly scenarios: readonly Scenario[]; // for the summary, in table order
  readonly servers: ReadonlySet<ServerId>;
  readonly rss: boolean;
  readonly claim: boolean;
  readonly pair: boolean; // the pass-through side by side with the baseline (pair.ts)
}

function interleave(baseline: Scenario, products: readonly Scenario[], withBaseline: boolean): Scenario[] {
  if (products.length === 0) return withBaseline ? [baseline] : [];
  return [baseline, ...products.flatMap((p) => [p, baseline])];
}

export function makePlan(opts: RunOptions): Plan {
  // The BENCH_OTHER twin of a scenario runs right after it (same load from the rest of the machine).
  const twins = OTHER_SCENARIOS.filter((s) => wants(opts, s.id) && (opts.other !== null || opts.only !== null));
  if (twins.length > 0 && opts.other === null) {
    throw new Error(`${twins.map((s) => s.id).join(', ')}: set BENCH_OTHER to the root of another built checkout (bench/README.md)`);
  }
  const twinOf = (s: Scenario): Scenario[] => twins.filter((t) => t.id === s.id.replace(/^(newkey|replay-pg)/, '$1-other'));
  const chosen = SCENARIOS.filter((s) => wants(opts, s.id)).flatMap((s) => [s, ...twinOf(s)]);
  const many = chosen.filter((s) => s.connections > 1);
  const one = chosen.filter((s) => s.connections === 1);
  const base50 = wants(opts, BASELINE.id) || many.length > 0;
  const base1 = wants(opts, BASELINE_1C.id) || one.length > 0;
  const order = [...interleave(BASELINE, many, base50), ...interleave(BASELINE_1C, one, base1)];
  const steps = order.map((scenario, seq) => ({ scenario, seq }));

  const rss = wants(opts, 'rss');
  const claim = wants(opts, 'claim');
  const pair = wants(opts, 'pair');
  const servers = new Set<ServerId>(steps.map((s) => s.scenario.server));
  servers.add('upstream');
  const scenarios = [...(base50 ? [BASELINE] : []), ...many, ...(base1 ? [BASELINE_1C] : []), ...one];
  return { steps, scenarios, servers, rss, claim, pair };
}
