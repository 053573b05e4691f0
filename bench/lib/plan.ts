// Which scenarios one invocation runs (from --only), in which order, and which
// servers that needs. One repetition alternates baseline and product at each
// connection count — B, P1, B, P2, …, Pn, B — so every product run sits
// between two baseline runs and is compared with their mean (bench/README.md,
// Method: baseline, product, baseline, product…).
import { wants, type RunOptions } from './options.js';
import { ALIASES, BASELINES, OTHER_SCENARIOS, SCENARIOS, baselineOf, type Scenario, type ServerId } from './scenarios.js';

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
  /** The tracing pairs to run (tracing off and on side by side, pair.ts): trace-pair-newkey, trace-pair-replay. */
  readonly tracePairs: readonly string[];
  /** The build pairs to run (BENCH_OTHER's build and this one side by side, pair.ts): build-pair-newkey, build-pair-replay. */
  readonly buildPairs: readonly string[];
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
  // One group per baseline (plain at 50 connections, over TLS, over HTTP/2, plain at 1), in that order.
  const groups = BASELINES.map((baseline) => {
    const products = chosen.filter((s) => baselineOf(s).id === baseline.id);
    return { baseline, products, run: wants(opts, baseline.id) || products.length > 0 };
  });
  const order = groups.flatMap((g) => interleave(g.baseline, g.products, g.run));
  const steps = order.map((scenario, seq) => ({ scenario, seq }));

  const rss = wants(opts, 'rss');
  const claim = wants(opts, 'claim');
  const pair = wants(opts, 'pair');
  const tracePairs = ALIASES['trace-pair']!.filter((id) => wants(opts, id));
  // Like the twins: in a whole run only when BENCH_OTHER is set; asked for by name, BENCH_OTHER is required.
  const buildPairs = ALIASES['build-pair']!.filter((id) => wants(opts, id) && (opts.other !== null || opts.only !== null));
  if (buildPairs.length > 0 && opts.other === null) {
    throw new Error(`${buildPairs.join(', ')}: set BENCH_OTHER to the root of another built checkout (bench/README.md)`);
  }
  const servers = new Set<ServerId>(steps.map((s) => s.scenario.server));
  servers.add('upstream');
  const scenarios = groups.flatMap((g) => (g.run ? [g.baseline, ...g.products] : []));
  return { steps, scenarios, servers, rss, claim, pair, tracePairs, buildPairs };
}
