// The benchmark's scenarios, in the order one repetition runs them,
// and the targets (bench/README.md) they are judged against.
import type { KeyPlan, Protocol } from './types.js';

export type ServerId =
  | 'upstream' | 'otlp-sink' | 'baseline' | 'baseline-tls' | 'baseline-h2'
  | 'proxy-pg' | 'proxy-pg-tls' | 'proxy-pg-traced' | 'proxy-redis' | 'proxy-embedded' | 'proxy-pg-other';


export type Goal =
  | { readonly kind: 'ratio-min'; readonly value: number } // req/s ≥ value × baseline (same run)
  | { readonly kind: 'p50-max'; readonly ms: number };

export interface Scenario {
  readonly id: string;
  readonly title: string;
  readonly server: ServerId;
  readonly path: string;
  readonly connections: number;
  readonly keys: KeyPlan;
  readonly goal: Goal | null;
  /** The baseline this scenario's ratio is taken against (same protocol, same run); absent: the plain one at its connection count. */
  readonly baseline?: string;
  /** Absent: 'http'. */
  readonly protocol?: Protocol;
}

export const REPLAY_KEYS = 1000;
export const STORM_DUPES = 50;
const unique: KeyPlan = { kind: 'unique' };

/** The 50-connection baseline: runs at the start and at the end of every repetition. */
export const BASELINE: Scenario = {
  id: 'baseline',
  title: 'baseline pass-through (node:http + undici)',
  server: 'baseline',
  path: '/bench/newkey',
  connections: 50,
  keys: unique,
  goal: null,
};

export const BASELINE_1C: Scenario = { ...BASELINE, id: 'baseline-1c', connections: 1 };

/** The baseline over TLS (node:https + undici, the run's certificate): what the TLS rows are compared with. */
export const BASELINE_TLS: Scenario = { ...BASELINE, id: 'baseline-tls', title: 'baseline pass-through over TLS (node:https + undici)', server: 'baseline-tls', protocol: 'https' };

/**
 * HTTP/2 over TLS (ALPN h2, what load balancers speak to backends), 50
 * streams in flight as H2_CONNECTIONS connections × H2_STREAMS streams
 * (lib/h2load.ts); the baseline is node:http2 + undici.
 */
export const H2_CONNECTIONS = 5;
export const H2_STREAMS = 10;
export const BASELINE_H2: Scenario = {
  ...BASELINE, id: 'baseline-h2', title: `baseline pass-through over HTTP/2 (node:http2 + undici, ${H2_CONNECTIONS} conns × ${H2_STREAMS} streams)`,
  server: 'baseline-h2', path: '/bench/h2/newkey', protocol: 'h2',
};

/** Every baseline, in run order; each runs before and after every product scenario compared with it. */
export const BASELINES: readonly Scenario[] = [BASELINE, BASELINE_TLS, BASELINE_H2, BASELINE_1C];

/** The baseline a product scenario is compared with. */
export function baselineOf(s: Scenario): Scenario {
  const id = s.baseline ?? (s.connections === 1 ? BASELINE_1C.id : BASELINE.id);
  return BASELINES.find((b) => b.id === id)!;
}

/** Product scenarios, in run order; every one is compared with the baseline at its connection count. */
export const SCENARIOS: readonly Scenario[] = [
  { id: 'direct', title: 'direct upstream (the limit)', server: 'upstream', path: '/bench/newkey', connections: 50, keys: unique, goal: null },
  { id: 'pass', title: 'proxy, pass-through route', server: 'proxy-pg', path: '/pass/x', connections: 50, keys: unique, goal: { kind: 'ratio-min', value: 0.95 } },
  { id: 'newkey', title: 'proxy, new key per request (PostgreSQL)', server: 'proxy-pg', path: '/bench/newkey', connections: 50, keys: unique, goal: { kind: 'ratio-min', value: 0.38 } },
  {
    id: 'replay-pg',
    title: 'proxy, replay from PostgreSQL (no Redis)',
    server: 'proxy-pg',
    path: '/bench/replay',
    connections: 50,
    keys: { kind: 'fixed', count: REPLAY_KEYS, warmPasses: 1 },
    goal: { kind: 'ratio-min', value: 0.5 },
  },
  // The same routes under profile: stripe (its error shape, headers and rules compiled per route): against newkey and replay-pg.
  { id: 'newkey-stripe', title: 'proxy, new key per request, profile: stripe', server: 'proxy-pg', path: '/bench/stripe/newkey', connections: 50, keys: unique, goal: null },
  {
    id: 'replay-pg-stripe',
    title: 'proxy, replay from PostgreSQL, profile: stripe',
    server: 'proxy-pg',
    path: '/bench/stripe/replay',
    connections: 50,
    keys: { kind: 'fixed', count: REPLAY_KEYS, warmPasses: 1 },
    goal: null,
  },
  // record: reference: a replay from PostgreSQL that answers with the current body from one upstream GET: against replay-pg and pass.
  {
    id: 'replay-pg-reference',
    title: 'proxy, replay from PostgreSQL, record: reference (one upstream GET each)',
    server: 'proxy-pg',
    path: '/bench/reference/replay',
    connections: 50,
    keys: { kind: 'fixed', count: REPLAY_KEYS, warmPasses: 1 },
    goal: null,
  },
  // Tracing on (every request sampled, spans exported over OTLP/HTTP to a sink on the server CPU): against newkey and replay-pg.
  { id: 'newkey-traced', title: 'proxy, new key per request, tracing on', server: 'proxy-pg-traced', path: '/bench/newkey', connections: 50, keys: unique, goal: null },
  {
    id: 'replay-pg-traced',
    title: 'proxy, replay from PostgreSQL, tracing on',
    server: 'proxy-pg-traced',
    path: '/bench/replay',
    connections: 50,
    keys: { kind: 'fixed', count: REPLAY_KEYS, warmPasses: 1 },
    goal: null,
  },
  {
    id: 'replay-redis',
    title: 'proxy, replay from Redis',
    server: 'proxy-redis',
    path: '/bench/replay',
    connections: 50,
    keys: { kind: 'fixed', count: REPLAY_KEYS, warmPasses: 2 },
    goal: { kind: 'ratio-min', value: 1.3 },
  },
  {
    id: 'storm',
    title: `proxy, ${STORM_DUPES} duplicates per key at once (Redis on)`,
    server: 'proxy-redis',
    path: '/bench/storm',
    connections: 50,
    keys: { kind: 'storm', dupes: STORM_DUPES },
    goal: null,
  },
  // Over TLS (wrk, HTTP/1.1) and over HTTP/2 (h2load, ALPN h2): one proxy with listen.tls and listen.http2, each row against the baseline over the same protocol.
  { id: 'newkey-tls', title: 'proxy over TLS, new key per request (PostgreSQL)', server: 'proxy-pg-tls', path: '/bench/newkey', connections: 50, keys: unique, goal: { kind: 'ratio-min', value: 0.38 }, baseline: BASELINE_TLS.id, protocol: 'https' },
  {
    id: 'replay-pg-tls',
    title: 'proxy over TLS, replay from PostgreSQL',
    server: 'proxy-pg-tls',
    path: '/bench/replay',
    connections: 50,
    keys: { kind: 'fixed', count: REPLAY_KEYS, warmPasses: 1 },
    goal: { kind: 'ratio-min', value: 0.5 },
    baseline: BASELINE_TLS.id,
    protocol: 'https',
  },
  { id: 'newkey-h2', title: 'proxy over HTTP/2, new key per request (PostgreSQL)', server: 'proxy-pg-tls', path: '/bench/h2/newkey', connections: 50, keys: unique, goal: { kind: 'ratio-min', value: 0.38 }, baseline: BASELINE_H2.id, protocol: 'h2' },
  {
    id: 'replay-pg-h2',
    title: 'proxy over HTTP/2, replay from PostgreSQL',
    server: 'proxy-pg-tls',
    path: '/bench/h2/replay',
    connections: 50,
    keys: { kind: 'fixed', count: REPLAY_KEYS, warmPasses: 1 },
    goal: { kind: 'ratio-min', value: 0.5 },
    baseline: BASELINE_H2.id,
    protocol: 'h2',
  },
  { id: 'embedded', title: 'proxy, embedded store (PGlite)', server: 'proxy-embedded', path: '/bench/newkey', connections: 50, keys: unique, goal: null },
  { id: 'direct-1c', title: 'direct upstream', server: 'upstream', path: '/bench/newkey', connections: 1, keys: unique, goal: null },
  { id: 'newkey-1c', title: 'proxy, new key (PostgreSQL)', server: 'proxy-pg', path: '/bench/newkey', connections: 1, keys: unique, goal: { kind: 'p50-max', ms: 2.2 } },
  {
    id: 'replay-pg-1c',
    title: 'proxy, replay from PostgreSQL (no Redis)',
    server: 'proxy-pg',
    path: '/bench/replay',
    connections: 1,
    keys: { kind: 'fixed', count: REPLAY_KEYS, warmPasses: 1 },
    goal: null,
  },
  {
    id: 'replay-redis-1c',
    title: 'proxy, replay from Redis',
    server: 'proxy-redis',
    path: '/bench/replay',
    connections: 1,
    keys: { kind: 'fixed', count: REPLAY_KEYS, warmPasses: 2 },
    goal: { kind: 'p50-max', ms: 0.3 },
  },
];

/**
 * Another build of the proxy (BENCH_OTHER: old against new in one run), on a
 * database of its own on the same server: the same four measurements as
 * newkey, replay-pg and their 1-connection twins, against the same baselines.
 */
const OTHER_OF: Readonly<Record<string, string>> = {
  newkey: 'newkey-other', 'replay-pg': 'replay-pg-other', 'newkey-1c': 'newkey-other-1c', 'replay-pg-1c': 'replay-pg-other-1c',
};
export const OTHER_SCENARIOS: readonly Scenario[] = Object.entries(OTHER_OF).map(([of, id]) => {
  const s = SCENARIOS.find((x) => x.id === of)!;
  return { ...s, id, title: `${s.title}, BENCH_OTHER build`, server: 'proxy-pg-other', goal: null };
});

/** Sections that are not load runs. */
export const EXTRAS = ['rss', 'claim', 'pair', 'trace-pair-newkey', 'trace-pair-replay', 'build-pair-newkey', 'build-pair-replay'] as const;
export type Extra = (typeof EXTRAS)[number];

export const ALIASES: Readonly<Record<string, readonly string[]>> = {
  latency: ['baseline-1c', 'direct-1c', 'newkey-1c', 'replay-pg-1c', 'replay-redis-1c'],
  throughput: ['baseline', 'direct', 'pass', 'newkey', 'replay-pg', 'replay-redis', 'storm', 'embedded', 'pair'],
  tracing: ['baseline', 'newkey', 'newkey-traced', 'replay-pg', 'replay-pg-traced', 'trace-pair-newkey', 'trace-pair-replay'],
  // Tracing off and on side by side (run.ts, TRACE_PAIRS): new key and replay.
  'trace-pair': ['trace-pair-newkey', 'trace-pair-replay'],
  profiles: ['baseline', 'newkey', 'newkey-stripe', 'replay-pg', 'replay-pg-stripe'],
  tls: ['baseline-tls', 'newkey-tls', 'replay-pg-tls', 'baseline-h2', 'newkey-h2', 'replay-pg-h2'],
  reference: ['baseline', 'pass', 'replay-pg', 'replay-pg-reference'],
  // This build against BENCH_OTHER's, side by side (run.ts, BUILD_PAIRS): new key and replay, tracing off on both unless BENCH_BUILD_TRACED=1.
  'build-pair': ['build-pair-newkey', 'build-pair-replay'],
  // This build against BENCH_OTHER's, each product run beside its twin.
  oldnew: ['baseline', 'newkey', 'newkey-other', 'replay-pg', 'replay-pg-other', 'baseline-1c', 'newkey-1c', 'newkey-other-1c', 'replay-pg-1c', 'replay-pg-other-1c'],
};

export function allNames(): string[] {
  return [...BASELINES.map((b) => b.id), ...SCENARIOS.map((s) => s.id), ...OTHER_SCENARIOS.map((s) => s.id), ...EXTRAS];
}

export function goalText(goal: Goal | null): string {
  if (goal === null) return '';
  return goal.kind === 'ratio-min' ? `≥ ${goal.value}×` : `p50 ≤ ${goal.ms} ms`;
}
