// The one table printed at the end (markdown), from the summarized results.
import type { ClaimResult } from './claim.js';
import { CLAIM_RATIO_LIMIT } from './claim.js';
import type { MemoryFigures } from './proc.js';
import type { PairResult } from './pair.js';
import { TRACING_CPU_LIMIT } from './pooled.js';
import { RSS_LIMIT_MIB, rssValid, type RssMeasure } from './rss.js';
import { goalText } from './scenarios.js';
import type { SummaryRow } from './summary.js';

export interface ReportInput {
  readonly header: string;
  readonly rows: readonly SummaryRow[];
  readonly skipped: readonly string[];
  readonly memory: Readonly<Record<string, MemoryFigures | null>>;
  readonly rss: readonly RssMeasure[];
  readonly claim: ClaimResult | null;
  readonly pair: PairResult | null;
  /** Tracing off against on, side by side: new key, replay from PostgreSQL (lib/pair.ts). */
  readonly tracePairs: readonly PairResult[];
  readonly buildPairs: readonly PairResult[];
}

const num = (x: number | null, digits = 0): string => (x === null ? '—' : x.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits }));
const ms = (x: number | null): string => (x === null ? '—' : x < 10 ? x.toFixed(3) : x.toFixed(1));
const verdict = (met: boolean | null): string => (met === null ? '' : met ? 'met' : '**missed**');

function statusShare(status: Readonly<Record<string, number>>): string {
  const total = Object.values(status).reduce((a, b) => a + b, 0);
  if (total === 0) return '';
  const parts = Object.entries(status).sort(([a], [b]) => a.localeCompare(b));
  if (parts.length === 1) return parts[0]![0];
  return parts.map(([code, n]) => `${code} ${((100 * n) / total).toFixed(n / total < 0.01 ? 2 : 0)}%`).join(', ');
}

function scenarioTable(rows: readonly SummaryRow[]): string[] {
  const out = [
    '| scenario | conns | req/s (median) | × baseline | p50 ms | p99 ms | statuses | errors | upstream calls / response | target | |',
    '|---|---:|---:|---:|---:|---:|---|---:|---:|---|---|',
  ];
  for (const r of rows) {
    const ratio = r.ratio === null ? '—' : `${r.ratio.toFixed(2)}×`;
    const title = r.error !== null && r.runs === 0 ? `${r.title} — failed: ${r.error.split('\n')[0]!.slice(0, 120)}` : r.title;
    out.push(
      `| ${title} | ${r.connections} | ${num(r.rps)} | ${ratio} | ${ms(r.p50)} | ${ms(r.p99)} | ${statusShare(r.status)} | ${r.errors} | ${num(r.upstreamPerResponse, 3)} | ${goalText(r.goal)} | ${verdict(r.met)} |`,
    );
  }
  return out;
}

function rssTable(rss: readonly RssMeasure[]): string[] {
  if (rss.length === 0) return [];
  const out = ['', `Memory with ${rss[0]!.sockets.toLocaleString('en')} open keep-alive connections (two rounds of requests on them):`, '', '| process | RSS idle MiB | peak RSS (VmHWM) MiB | RSS with sockets open MiB | sockets opened / still idle-open | statuses | target | |', '|---|---:|---:|---:|---|---|---|---|'];
  for (const m of rss) {
    if (m.error !== null) {
      out.push(`| ${m.server} — failed: ${m.error.split('\n')[0]!.slice(0, 120)} | | | | | | | |`);
      continue;
    }
    const statuses = m.report?.rounds.map((r) => `${statusShare(r.status)}${r.errors > 0 ? ` (${r.errors} errors)` : ''}`).join(' / ') ?? '';
    const isProxy = m.isProxy;
    const met = isProxy && m.open !== null ? m.open.hwmMiB <= RSS_LIMIT_MIB : null;
    const judged = rssValid(m) ? verdict(met) : 'invalid: not all 2xx';
    out.push(
      `| ${m.server} | ${num(m.idle?.rssMiB ?? null, 1)} | ${num(m.open?.hwmMiB ?? null, 1)} | ${num(m.open?.rssMiB ?? null, 1)} | ${m.report?.socketsOpened ?? '—'} / ${m.report?.socketsIdleNow ?? '—'} | ${statuses} | ${isProxy ? `≤ ${RSS_LIMIT_MIB} MiB` : ''} | ${judged} |`,
    );
  }
  return out;
}

function claimTable(claim: ClaimResult | null): string[] {
  if (claim === null) return [];
  const out = ['', 'Claim latency against table size (new key per request, 1 connection):', '', '| rows in table | seeding s | p50 ms | p99 ms | req/s | failed |', '|---:|---:|---:|---:|---:|---|'];
  for (const s of claim.sizes) {
    out.push(`| ${s.rows.toLocaleString('en')} | ${s.seedMs === null ? '—' : (s.seedMs / 1000).toFixed(1)} | ${ms(s.p50)} | ${ms(s.p99)} | ${num(s.rps)} | ${s.error?.split('\n')[0]?.slice(0, 120) ?? ''} |`);
  }
  const scope = claim.isFullTarget ? '' : ' (10^6 stands in for 10^7; BENCH_BIG=1 runs the real target)';
  out.push('', `p50 ratio big/small: ${claim.p50Ratio === null ? '—' : `${claim.p50Ratio}×`} — target ≤ ${CLAIM_RATIO_LIMIT}×${scope}: ${verdict(claim.met) || '—'}`);
  return out;
}

/** The tracing pairs and traced build pairs: a traced side that dropped spans did less than every request sampled asks for (lib/lost-spans.ts). */
function lostNote(lost: number | null | undefined, who = 'the traced proxy'): string {
  if (lost === undefined || lost === 0) return '';
  if (lost === null) return ` **Not judged:** ${who}'s log could not be read for lost spans.`;
  return ` **Not judged:** ${who} lost at least ${lost.toLocaleString('en')} spans during this pair (its log: tracing: spans lost), so it encoded and sent fewer than every request sampled asks for and its CPU per request reads low.`;
}

/** How long a pair's sides were loaded before its counted rounds, for its lead sentence. */
function primed(primeS: number | undefined): string {
  if (primeS === undefined) return '';
  return primeS > 0 ? `, after ${primeS} s of load not counted` : ', with no load before the counted rounds';
}

function pairTable(pair: PairResult | null): string[] {
  if (pair === null) return [];
  const x = (v: number | null): string => (v === null ? '—' : `${v.toFixed(3)}×`);
  const [a, b] = pair.shape.labels;
  const tracing = pair.shape.id.startsWith('trace-pair');
  const builds = pair.shape.id.startsWith('build-pair');
  const out = [
    '',
    `${pair.shape.title} loaded at the same moment, ${pair.connections} connections each, each with an upstream of its own${tracing ? ' (the traced side\'s span sink counted with its upstream)' : ''}, all on the same CPU (lib/pair.ts)${primed(pair.primeS)}; CPU µs per request from /proc over the middle of each run:`,
    '',
    `| round | ${a} req/s | ${b} req/s | ${b} / ${a} req/s | ${a} CPU | ${b} CPU | ${b} / ${a} CPU | its upstream${tracing ? ' (+ sink)' : ''}: ${a} / ${b} | with the upstream: ${b} / ${a} | |`,
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
  ];
  for (const r of pair.rounds) {
    out.push(
      `| ${r.round} | ${num(r.baseline?.rps ?? null)} | ${num(r.proxy?.rps ?? null)} | ${x(r.ratio)} | ${num(r.baselineCpuUs)} | ${num(r.proxyCpuUs)} | ${x(r.cpuRatio)} | ${num(r.baselineUpstreamCpuUs)} / ${num(r.proxyUpstreamCpuUs)} | ${x(r.totalCpuRatio)} | ${r.error?.split('\n')[0]?.slice(0, 120) ?? ''} |`,
    );
  }
  out.push('', builds
    ? `Medians: request rate ${x(pair.ratio)} BENCH_OTHER's build's; this build's CPU per request ${x(pair.cpuRatio)} BENCH_OTHER's (below 1×: this build is the cheaper), ${x(pair.totalCpuRatio)} with each side's upstream. No target: two builds compared in one run; with BENCH_OTHER set to this checkout it reads the pair's own lean, a few per cent either way from run to run (bench/README.md, build-pair).${lostNote(pair.spansLost, 'a traced side')}`
    : tracing
    ? `Medians: request rate ${x(pair.ratio)} tracing off's; the proxy's CPU per request ${x(pair.cpuRatio)} tracing off's, ${x(pair.totalCpuRatio)} with each side's upstream and the sink. The tracing target (≤ 5 % of throughput) holds when the CPU per request is ≤ ${x(TRACING_CPU_LIMIT)} — on a CPU-bound core throughput is the inverse of the CPU per request; the rates of two busy sides can lean either way by several per cent.${lostNote(pair.spansLost)}`
    : `Medians: request rate ${x(pair.ratio)} the baseline's; CPU per request ${x(pair.cpuRatio)} the baseline's, ${x(pair.totalCpuRatio)} with each side's upstream (the cost to the shared core, which bounds the alternating rows). A cross-check of the pass-through row, whose verdict stands: the scheduler need not share the CPU evenly between two busy sides, so the rates can lean either way; the CPU per request is each one's own cost (≥ 0.95× the rate is ≤ 1.053× the CPU).`);
  return out;
}

/** The anchor (bench/README.md, Targets): the bare baseline's p50 at 1 connection on the machine the latency targets were set on. */
export const ANCHOR_BASELINE_1C_P50_MS = 0.27;

/**
 * The latency targets are absolute, and the machines are not: a sentence
 * putting each 1-connection p50 beside the baseline's own p50 in the same run,
 * and what it would be on the anchor machine (bench/README.md) if everything scaled
 * alike (a rough guide only: an fsync does not scale with the CPU). The
 * verdict in the table stays the absolute one.
 */
export function latencyNote(rows: readonly SummaryRow[]): string[] {
  const base = rows.find((r) => r.id === 'baseline-1c')?.p50 ?? null;
  const judged = rows.filter((r) => r.goal?.kind === 'p50-max' && r.p50 !== null);
  if (base === null || base <= 0 || judged.length === 0) return [];
  const scale = ANCHOR_BASELINE_1C_P50_MS / base;
  const parts = judged.map((r) => `${r.title}: ${ms(r.p50)} ms = ${(r.p50! / base).toFixed(2)}× the baseline's, ≈ ${ms(r.p50! * scale)} ms there (target ${goalText(r.goal)})`);
  return ['', `At 1 connection the bare baseline's own p50 was ${ms(base)} ms in this run; on the anchor machine (bench/README.md) it was ${ANCHOR_BASELINE_1C_P50_MS} ms. Scaled alike (rough: an fsync does not scale with the CPU): ${parts.join('; ')}.`];
}

/** The TLS and HTTP/2 rows' ratios are to their own baselines (lib/scenarios.ts, BASELINES). */
function protocolNote(rows: readonly SummaryRow[]): string[] {
  if (!rows.some((r) => r.id === 'baseline-tls' || r.id === 'baseline-h2')) return [];
  return ['', 'Rows over TLS and over HTTP/2: × baseline is to the baseline over the same protocol (node:https or node:http2 + undici, the same certificate), run before and after each of them; the HTTP/2 rows\' 50 are streams in flight, 5 connections × 10 (lib/h2load.ts).'];
}

export function renderReport(input: ReportInput): string {
  const lines = [input.header];
  if (input.rows.length > 0) lines.push('', ...scenarioTable(input.rows), ...latencyNote(input.rows), ...protocolNote(input.rows));
  if (input.skipped.length > 0) lines.push('', ...input.skipped.map((s) => `- not run: ${s}`));
  lines.push(...pairTable(input.pair), ...input.tracePairs.flatMap((p) => pairTable(p)), ...input.buildPairs.flatMap((p) => pairTable(p)), ...rssTable(input.rss), ...claimTable(input.claim));
  const mem = Object.entries(input.memory).filter(([, m]) => m !== null);
  if (mem.length > 0 && input.rows.length > 0) lines.push('', `Peak RSS during the load runs: ${mem.map(([name, m]) => `${name} ${num(m!.hwmMiB, 1)} MiB`).join(', ')}`);
  return `${lines.join('\n')}\n`;
}
