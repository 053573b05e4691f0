// Several bench runs' pairs pooled (bench/pairs-summary.ts): the statistics,
// which runs are pooled together and which are left out, and the command
// itself run as a process over results files written here.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { renderPooled } from '../../bench/pairs-summary.js';
import type { BenchContext } from '../../bench/lib/context.js';
import { parseRunOptions } from '../../bench/lib/options.js';
import { headerText, writeResults, type RunFacts } from '../../bench/lib/output.js';
import { nodeFlagsOf } from '../../bench/lib/servers.js';
import { NODE_FLAGS } from '../../src/node-flags.js';
import { renderReport } from '../../bench/lib/report.js';
import { groupPairs, readRunPairs, type RunPairs } from '../../bench/lib/pair-runs.js';
import type { PairResult, PairRound } from '../../bench/lib/pair.js';
import { decide, pool, t95, TRACING_CPU_LIMIT } from '../../bench/lib/pooled.js';
import { repoRoot } from '../helpers/repo.js';

const root = repoRoot();

const TITLE = 'Tracing side by side, replay from PostgreSQL: the same proxy with tracing off and on (every request sampled, OTLP http/protobuf to a sink)';

function round(i: number, cpuRatio: number | null, error: string | null = null): PairRound {
  return {
    round: i, baseline: null, proxy: null, ratio: null, baselineCpuUs: 100, proxyCpuUs: cpuRatio === null ? null : 100 * cpuRatio, cpuRatio,
    baselineUpstreamCpuUs: 0, proxyUpstreamCpuUs: 1, totalCpuRatio: null, error,
  };
}

function tracePair(cpuRatio: number, extra: Partial<PairResult> = {}, id = 'trace-pair-replay', title = TITLE): PairResult {
  return {
    shape: { id, labels: ['tracing off', 'tracing on'], paths: ['/bench/replay', '/bench/replay'], title },
    connections: 25, rounds: [round(1, cpuRatio), round(2, cpuRatio)], ratio: 1 / cpuRatio, cpuRatio, totalCpuRatio: cpuRatio, spansLost: 0, ...extra,
  };
}

const run = (file: string, startedAt: string, pairs: PairResult[], node = 'v20.20.2', build: string | null = 'e3c6c03abcde', otherBuild: string | null = null, nodeOptions: string | null = null): RunPairs =>
  ({ file, startedAt, node, build, otherBuild, nodeOptions, pairs });

describe('pooling runs', () => {
  test('the mean, the runs\' standard deviation and the mean\'s one-sided 95 % bounds (Student\'s t)', () => {
    const p = pool([1.0, 1.1]);
    assert.equal(p.n, 2);
    assert.ok(Math.abs(p.mean - 1.05) < 1e-12);
    assert.ok(Math.abs(p.sd! - Math.SQRT1_2 / 10) < 1e-12); // sqrt((0.05² + 0.05²) / 1)
    // t(1) = 6.314, standard error sd / sqrt(2) = 0.05
    assert.ok(Math.abs(p.upper! - (1.05 + 6.314 * 0.05)) < 1e-12);
    assert.ok(Math.abs(p.lower! - (1.05 - 6.314 * 0.05)) < 1e-12);
    const seven = pool([1.051, 1.039, 1.037, 1.058, 1.043, 1.049, 1.050]);
    const mean = 7.327 / 7;
    assert.ok(Math.abs(seven.mean - mean) < 1e-12);
    assert.ok(seven.upper! > seven.mean && seven.lower! < seven.mean);
    assert.ok(Math.abs(seven.upper! - seven.mean - 1.943 * seven.sd! / Math.sqrt(7)) < 1e-12, 't(6) = 1.943');
  });

  test('one run has a mean and nothing to bound it; t past 30 degrees of freedom stays at 30\'s', () => {
    assert.deepEqual(pool([1.04]), { n: 1, mean: 1.04, sd: null, lower: null, upper: null });
    assert.equal(decide(pool([1.0]), TRACING_CPU_LIMIT), 'not decided');
    assert.equal(t95(1), 6.314);
    assert.equal(t95(30), 1.697);
    assert.equal(t95(100), 1.697);
    assert.throws(() => t95(0), /degrees of freedom/);
    assert.throws(() => pool([]), /no runs/);
    assert.throws(() => pool([1, Number.NaN]), /not a ratio/);
  });

  test('a single run\'s report names the same limit the pooled runs are judged against', () => {
    const text = renderReport({ header: '#', rows: [], skipped: [], memory: {}, rss: [], claim: null, pair: null, tracePairs: [tracePair(1.04)], buildPairs: [] });
    const named = /holds when the CPU per request is ≤ ([\d.]+)×/.exec(text);
    assert.ok(named, 'the tracing pair\'s report names its limit');
    assert.equal(Number(named[1]), Number(TRACING_CPU_LIMIT.toFixed(3)));
    assert.equal(named[1], '1.053');
  });

  test('met when the upper bound is at or under the limit, missed when the lower bound is over it, else not decided', () => {
    assert.ok(Math.abs(TRACING_CPU_LIMIT - 1.0526315789) < 1e-9);
    assert.equal(decide(pool([1.030, 1.035, 1.028, 1.033, 1.031]), TRACING_CPU_LIMIT), 'met');
    assert.equal(decide(pool([1.080, 1.090, 1.085, 1.075]), TRACING_CPU_LIMIT), 'missed');
    // Mean 1.050, under the limit, but the runs scatter too much to say so.
    assert.equal(decide(pool([1.020, 1.080, 1.030, 1.070]), TRACING_CPU_LIMIT), 'not decided');
    // Every run under the limit but one, and the mean under it: still not decided with this scatter.
    assert.equal(decide(pool([1.040, 1.045, 1.050, 1.060]), TRACING_CPU_LIMIT), 'not decided');
  });
});

describe('grouping runs', () => {
  test('only pairs measured alike are pooled: the same pair and setting, build, Node and NODE_OPTIONS', () => {
    const groups = groupPairs([
      run('b.json', '2026-12-05T12:00:00Z', [tracePair(1.05, {}, 'trace-pair-newkey', 'new key'), tracePair(1.04)]),
      run('a.json', '2026-12-05T11:00:00Z', [tracePair(1.03)]),
      run('c.json', '2026-12-05T13:00:00Z', [tracePair(1.06)], 'v24.22.3'),
      run('d.json', '2026-12-05T14:00:00Z', [tracePair(1.07)], 'v20.20.2', '0123456789ab'),
      run('e.json', '2026-12-05T15:00:00Z', [tracePair(1.01, {}, 'trace-pair-replay', `${TITLE.slice(0, -1)}, OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1024)`)]),
      run('f.json', '2026-12-05T16:00:00Z', [tracePair(1.02)], 'v20.20.2', 'e3c6c03abcde', null, '--max-semi-space-size=16'),
    ]);
    const summary = groups.map((g) => [g.id, g.node, g.build, g.runs.map((r) => r.file)]);
    assert.deepEqual(summary, [
      ['trace-pair-replay', 'v20.20.2', 'e3c6c03abcde', ['a.json', 'b.json']],
      ['trace-pair-newkey', 'v20.20.2', 'e3c6c03abcde', ['b.json']],
      ['trace-pair-replay', 'v24.22.3', 'e3c6c03abcde', ['c.json']],
      ['trace-pair-replay', 'v20.20.2', '0123456789ab', ['d.json']],
      ['trace-pair-replay', 'v20.20.2', 'e3c6c03abcde', ['e.json']],
      ['trace-pair-replay', 'v20.20.2', 'e3c6c03abcde', ['f.json']],
    ]);
    assert.match(renderPooled(groups), /build e3c6c03abcde, Node v20\.20\.2 \(NODE_OPTIONS=--max-semi-space-size=16\): [^\n]*\| 1 \| 1\.020 \|/);
  });

  test('runs primed for different times are not pooled together; results from before priming was recorded form their own group', () => {
    const groups = groupPairs([
      run('long.json', '1', [tracePair(1.02, { primeS: 30 })]),
      run('short.json', '2', [tracePair(1.08, { primeS: 2 })]),
      run('old.json', '3', [tracePair(1.05)]),
      run('long2.json', '4', [tracePair(1.03, { primeS: 30 })]),
    ]);
    assert.deepEqual(groups.map((g) => [g.primeS, g.runs.map((r) => r.file)]), [[30, ['long.json', 'long2.json']], [2, ['short.json']], [null, ['old.json']]]);
    const text = renderPooled(groups);
    assert.match(text, /Node v20\.20\.2, primed 30 s: [^\n]*\| 2 \| 1\.020, 1\.030 \|/);
    assert.match(text, /Node v20\.20\.2, primed 2 s: [^\n]*\| 1 \| 1\.080 \|/);
    assert.match(text, /Node v20\.20\.2: Tracing side by side[^\n]*\| 1 \| 1\.050 \|/);
    // A single run's report says how long its sides were loaded before the counted rounds.
    const report = (primeS?: number): string => renderReport({ header: '#', rows: [], skipped: [], memory: {}, rss: [], claim: null, pair: null, tracePairs: [tracePair(1.04, primeS === undefined ? {} : { primeS })], buildPairs: [] });
    assert.match(report(30), /all on the same CPU \(lib\/pair\.ts\), after 30 s of load not counted; CPU µs per request/);
    assert.match(report(0), /, with no load before the counted rounds; CPU µs/);
    assert.match(report(), /all on the same CPU \(lib\/pair\.ts\); CPU µs/);
  });

  test('the tracing pairs prime for BENCH_TRACE_PRIME seconds (30 unless set), checked by name', () => {
    assert.equal(parseRunOptions([], {}).tracePrimeS, 30);
    assert.equal(parseRunOptions([], { BENCH_TRACE_PRIME: '0' }).tracePrimeS, 0);
    assert.equal(parseRunOptions([], { BENCH_TRACE_PRIME: '60' }).tracePrimeS, 60);
    assert.throws(() => parseRunOptions([], { BENCH_TRACE_PRIME: '121' }), /BENCH_TRACE_PRIME=121: expected a number from 0 to 120/);
    assert.throws(() => parseRunOptions([], { BENCH_TRACE_PRIME: 'long' }), /BENCH_TRACE_PRIME=long/);
  });

  test('a build pair is pooled only with runs against the same other build', () => {
    const build = (ratio: number): PairResult => tracePair(ratio, { spansLost: undefined }, 'build-pair-replay', 'Builds side by side, replay');
    const groups = groupPairs([
      run('a.json', '1', [build(0.99)], 'v20.20.2', 'aaaa', 'bbbb'),
      run('b.json', '2', [build(1.01)], 'v20.20.2', 'aaaa', 'cccc'),
      run('c.json', '3', [build(1.00)], 'v20.20.2', 'aaaa', 'bbbb'),
    ]);
    assert.deepEqual(groups.map((g) => [g.otherBuild, g.runs.map((r) => r.file)]), [['bbbb', ['a.json', 'c.json']], ['cccc', ['b.json']]]);
    assert.match(renderPooled(groups), /\| \*\*build-pair-replay\*\*, build aaaa against BENCH_OTHER's bbbb[^\n]*\| 2 \| 0\.990, 1\.000 \|[^\n]*\| no target \|/);
  });

  test('a run whose traced side lost spans, or whose log could not be read, or with a failed round, is left out and said so', () => {
    const groups = groupPairs([
      run('lost.json', '1', [tracePair(1.01, { spansLost: 450 })]),
      run('unread.json', '2', [tracePair(1.01, { spansLost: null })]),
      run('failed.json', '3', [tracePair(1.01, { rounds: [round(1, 1.01), round(2, null, 'wrk exited 1\nmore')] })]),
      run('good.json', '4', [tracePair(1.04)]),
      run('good2.json', '5', [tracePair(1.05)]),
    ]);
    assert.equal(groups.length, 1);
    assert.deepEqual(groups[0]!.runs.map((r) => r.cpuRatio), [1.04, 1.05]);
    assert.deepEqual(groups[0]!.left, [
      { file: 'lost.json', why: '450 spans lost: the traced side did less than every request sampled asks for' },
      { file: 'unread.json', why: "the traced side's log could not be read for lost spans" },
      { file: 'failed.json', why: 'round 2 failed (wrk exited 1)' },
    ]);
    const text = renderPooled(groups);
    assert.match(text, /\| 2 \| 1\.040, 1\.050 \| 1\.045× \|/);
    assert.match(text, /- trace-pair-replay: lost\.json left out: 450 spans lost/);
  });
});

describe('the command', () => {
  let dir = '';
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'pairs-summary-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const write = (name: string, body: unknown): string => {
    const file = join(dir, name);
    writeFileSync(file, typeof body === 'string' ? body : JSON.stringify(body));
    return file;
  };
  const results = (startedAt: string, cpuRatios: [number, number], build: string | null = 'e3c6c03abcde'): Record<string, unknown> => ({
    startedAt, finishedAt: startedAt, command: 'npm run bench -- --only trace-pair', node: 'v20.20.2', build,
    tracePairs: [tracePair(cpuRatios[0], {}, 'trace-pair-newkey', 'new key'), tracePair(cpuRatios[1])], buildPairs: [], pair: null,
  });
  const summary = (...args: string[]) => spawnSync(process.execPath, [join(root, 'dist/bench/pairs-summary.js'), ...args], { encoding: 'utf8' });

  test('results files pooled: each pair\'s runs, their mean and bounds, and the tracing target decided or not', () => {
    const files = [
      write('1.json', results('2026-12-05T11:00:00Z', [1.080, 1.031])),
      write('2.json', results('2026-12-05T11:05:00Z', [1.090, 1.033])),
      write('3.json', results('2026-12-05T11:10:00Z', [1.085, 1.029])),
    ];
    const r = summary(...files);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /\| \*\*trace-pair-newkey\*\*, build e3c6c03abcde, Node v20\.20\.2: new key \| 3 \| 1\.080, 1\.090, 1\.085 \| 1\.085× \|[^\n]*\| missed \|/);
    assert.match(r.stdout, /\| \*\*trace-pair-replay\*\*, build e3c6c03abcde, Node v20\.20\.2: Tracing side by side[^\n]*\| 3 \| 1\.031, 1\.033, 1\.029 \| 1\.031× \|[^\n]*\| met \|/);
    // Results written before the build was recorded are pooled among themselves, and say so.
    const old = summary(write('old.json', results('2026-12-05T10:00:00Z', [1.05, 1.05], null)));
    assert.equal(old.status, 0, old.stderr);
    assert.match(old.stdout, /build \(not recorded\)[^\n]*\| 1 \| 1\.050 \| 1\.050× \| — \| — \(one run\) \| not decided \|/);
  });

  test('a file that is not a bench results file stops it with the file\'s name; no file at all, with its usage', () => {
    const bad = write('bad.json', '{"startedAt": ');
    let r = summary(bad);
    assert.equal(r.status, 2);
    assert.match(r.stderr, new RegExp(`pairs-summary: ${bad.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: not a bench results file`));
    const noNode = write('no-node.json', { startedAt: 'x', tracePairs: [] });
    r = summary(noNode);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /no-node\.json: not a bench results file \(node: not a string\)/);
    const badPair = write('bad-pair.json', { startedAt: 'x', node: 'v20', tracePairs: [{ shape: {} }] });
    r = summary(badPair);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /bad-pair\.json: tracePairs\[0\]: not a pair's result/);
    const badPrime = write('bad-prime.json', { startedAt: 'x', node: 'v20', tracePairs: [tracePair(1.02, { primeS: 'long' as unknown as number })] });
    r = summary(badPrime);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /bad-prime\.json: tracePairs\[0\]: primeS: not a number of seconds/);
    r = summary(join(dir, 'missing.json'));
    assert.equal(r.status, 2);
    assert.match(r.stderr, /missing\.json: not a bench results file \(ENOENT/);
    r = summary();
    assert.equal(r.status, 2);
    assert.match(r.stderr, /usage: node dist\/bench\/pairs-summary\.js/);
  });

  test('what the bench writes (lib/output.ts) is read back: its pairs, its Node and its build', () => {
    const notGit = mkdtempSync(join(dir, 'checkout-'));
    const ctx = { projectRoot: notGit, opts: parseRunOptions([], {}), pin: { enabled: false, reason: 'test' } } as unknown as BenchContext;
    const facts: RunFacts = { started: new Date('2026-12-05T12:00:00Z'), command: 'npm run bench', loadAtStart: 0, settings: null, services: '', commitProbe: null, otherNodeFlags: null };
    const file = writeResults(ctx, facts, { tracePairs: [tracePair(1.02, {}, 'trace-pair-newkey', 'new key'), tracePair(1.03)], buildPairs: [], pair: null });
    const read = readRunPairs(file);
    assert.equal(read.node, process.version);
    assert.equal(read.nodeOptions, process.env['NODE_OPTIONS'] || null);
    assert.equal(read.build, null, 'not a git checkout: no build');
    assert.equal(read.startedAt, '2026-12-05T12:00:00.000Z');
    assert.deepEqual(read.pairs.map((p) => [p.shape.id, p.cpuRatio]), [['trace-pair-newkey', 1.02], ['trace-pair-replay', 1.03]]);
    // This checkout's build as the bench records it: the commit, marked when tracked files differ from it.
    const here = writeResults({ ...ctx, projectRoot: root } as BenchContext, { ...facts, started: new Date('2000-01-01T00:00:00Z') }, { tracePairs: [] });
    try {
      assert.match(readRunPairs(here).build ?? '', /^[0-9a-f]{12}( with uncommitted changes)?$/);
    } finally {
      rmSync(here);
    }
  });

  test("BENCH_OTHER's node options: read from its own build, named in the header and recorded in the results", async () => {
    // This checkout's own (dist/src/node-flags.js), and none for a checkout built before the proxy had any.
    assert.deepEqual(await nodeFlagsOf(root), NODE_FLAGS);
    const old = mkdtempSync(join(dir, 'old-build-'));
    assert.deepEqual(await nodeFlagsOf(old), []);
    const ctx = { projectRoot: old, opts: { ...parseRunOptions([], {}), other: old }, pin: { enabled: false, reason: 'test' } } as unknown as BenchContext;
    const facts: RunFacts = {
      started: new Date('2026-12-05T12:00:00Z'), command: 'npm run bench', loadAtStart: 0, settings: null, services: '', commitProbe: null,
      otherNodeFlags: ['--max-semi-space-size=4', '--no-maglev'],
    };
    assert.match(headerText(ctx, facts), /BENCH_OTHER side: the build in .*, its proxy started with --max-semi-space-size=4 --no-maglev \(its own\)/);
    assert.match(headerText(ctx, { ...facts, otherNodeFlags: [] }), /its proxy started with no node options of its own/);
    const file = writeResults(ctx, facts, { tracePairs: [] });
    assert.deepEqual((JSON.parse(readFileSync(file, 'utf8')) as { otherNodeFlags: unknown }).otherNodeFlags, ['--max-semi-space-size=4', '--no-maglev']);
  });
});
