// Several bench runs' side-by-side pairs, pooled (bench/README.md, Judging a
// target on several runs). One run of a pair moves by about ±3 % on a
// two-core machine, and the tracing target is 5 % wide, so single runs fall
// on both sides of it. This reads the raw results of several runs and, for
// each pair measured alike (the same pair and setting, build, Node,
// NODE_OPTIONS and priming), puts each run's median CPU per request beside
// their mean and its one-sided 95 % bounds; for the tracing pairs it says
// whether those runs decide the target (met, missed, not decided) against
// the limit the single runs' report names (lib/pooled.ts). Not a bench run:
// it measures nothing itself.
//
//   node dist/bench/pairs-summary.js bench/results/<run>.json …
//     → markdown on stdout; exit 2 with a message naming the file when one is not a results file
import { isEntry } from './lib/cli-args.js';
import { groupPairs, readRunPairs, type PairGroup } from './lib/pair-runs.js';
import { decide, pool, TRACING_CPU_LIMIT } from './lib/pooled.js';

const x = (v: number | null): string => (v === null ? '—' : `${v.toFixed(3)}×`);

function describe(g: PairGroup): string {
  const other = g.otherBuild === null ? '' : ` against BENCH_OTHER's ${g.otherBuild}`;
  const options = g.nodeOptions === null ? '' : ` (NODE_OPTIONS=${g.nodeOptions})`;
  const primed = g.primeS === null ? '' : `, primed ${g.primeS} s`;
  return `**${g.id}**, build ${g.build ?? '(not recorded)'}${other}, Node ${g.node}${options}${primed}: ${g.title}`;
}

export function renderPooled(groups: readonly PairGroup[]): string {
  if (groups.length === 0) return 'No side-by-side pairs in these results.\n';
  const out = [
    `Several runs pooled: each run's median CPU per request (the second side's over the first's), their mean and the mean's one-sided 95 % bounds (Student's t). The tracing target is ${x(TRACING_CPU_LIMIT)} (5 % of throughput): met when the upper bound is at or under it, missed when the lower bound is over it, otherwise not decided by these runs.`,
    '',
    '| pair | runs | each run | mean | sd | the mean\'s one-sided 95 % bounds | tracing target |',
    '|---|---:|---|---:|---:|---|---|',
  ];
  const notes: string[] = [];
  for (const g of groups) {
    const values = g.runs.map((r) => r.cpuRatio);
    const tracing = g.id.startsWith('trace-pair');
    if (values.length === 0) {
      out.push(`| ${describe(g)} | 0 | | | | | ${tracing ? 'not decided' : ''} |`);
    } else {
      const p = pool(values);
      const bounds = p.lower === null ? '— (one run)' : `${x(p.lower)} – ${x(p.upper)}`;
      out.push(`| ${describe(g)} | ${p.n} | ${values.map((v) => v.toFixed(3)).join(', ')} | ${x(p.mean)} | ${p.sd === null ? '—' : p.sd.toFixed(3)} | ${bounds} | ${tracing ? decide(p, TRACING_CPU_LIMIT) : 'no target'} |`);
    }
    for (const l of g.left) notes.push(`- ${g.id}: ${l.file} left out: ${l.why}.`);
  }
  if (notes.length > 0) out.push('', ...notes);
  return `${out.join('\n')}\n`;
}

if (isEntry(import.meta.url)) {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    process.stderr.write('usage: node dist/bench/pairs-summary.js bench/results/<run>.json …\n');
    process.exit(2);
  }
  try {
    process.stdout.write(renderPooled(groupPairs(files.map(readRunPairs))));
  } catch (err) {
    process.stderr.write(`pairs-summary: ${(err as Error).message}\n`);
    process.exit(2);
  }
}
