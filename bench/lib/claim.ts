// Claim latency against table size: two databases, 10^5 rows and 10^7 rows
// (10^6 unless BENCH_BIG=1: seeding 10^7 random keys takes minutes), one
// proxy on each, new-key requests at 1 connection, interleaved repetitions.
import type { ServerHandle } from './children.js';
import { REQUEST_BODY, type BenchContext } from './context.js';
import { dropDatabase, recreateDatabase, seedRows } from './pg.js';
import { startProxy } from './servers.js';
import { median } from './summary.js';
import type { CannonResult } from './types.js';

export interface ClaimSize {
  readonly label: string;
  readonly rows: number;
  readonly seedMs: number | null;
  readonly tableRows: number | null;
  readonly runs: readonly CannonResult[];
  readonly p50: number | null;
  readonly p99: number | null;
  readonly rps: number | null;
  readonly error: string | null;
}

export interface ClaimResult {
  readonly sizes: readonly ClaimSize[];
  readonly p50Ratio: number | null; // big / small
  readonly isFullTarget: boolean; // true when the big table has 10^7 rows
  readonly met: boolean | null;
}

export const CLAIM_RATIO_LIMIT = 1.5;

interface Prepared {
  label: string;
  rows: number;
  db: string;
  proxy: ServerHandle | null;
  seedMs: number | null;
  tableRows: number | null;
  runs: CannonResult[];
  error: string | null;
}

/** Every database this section may create (for cleanup after an interruption). */
export function claimDatabases(opts: { readonly dbName: string }): string[] {
  return ['1e5', '1e6', '1e7'].map((label) => `${opts.dbName}_rows_${label}`);
}

const message = (err: unknown): string => (err instanceof Error ? err.message : String(err));

async function prepare(ctx: BenchContext, upstream: string, p: Prepared): Promise<void> {
  try {
    const url = await recreateDatabase(ctx.opts.adminUrl, p.db);
    p.proxy = await startProxy(ctx, { name: `proxy-rows-${p.label}`, upstream, databaseUrl: url, redisUrl: null });
    ctx.log(`claim: seeding ${p.rows.toLocaleString('en')} rows into ${p.db}${p.rows >= 1e7 ? ' (several minutes)' : ''}`);
    const seeded = await seedRows(url, ctx.opts.table, 1, p.rows);
    p.seedMs = seeded.ms;
    p.tableRows = seeded.rows;
    ctx.log(`claim: ${p.db}.${seeded.table} has ${seeded.rows.toLocaleString('en')} rows (${(seeded.ms / 1000).toFixed(1)} s)`);
  } catch (err) {
    p.error = message(err);
  }
}

export async function measureClaim(ctx: BenchContext, upstream: string): Promise<ClaimResult> {
  const bigRows = ctx.opts.big ? 10_000_000 : 1_000_000;
  const sizes: Prepared[] = [
    { label: '1e5', rows: 100_000 },
    { label: ctx.opts.big ? '1e7' : '1e6', rows: bigRows },
  ].map((s) => ({ ...s, db: `${ctx.opts.dbName}_rows_${s.label}`, proxy: null, seedMs: null, tableRows: null, runs: [], error: null }));
  try {
    for (const s of sizes) await prepare(ctx, upstream, s);
    for (let rep = 1; rep <= ctx.opts.reps; rep += 1) {
      for (const s of sizes) {
        if (s.proxy === null || s.error !== null || ctx.interrupted()) continue;
        try {
          const r = await ctx.load.cannon({
            mode: 'cannon',
            origin: s.proxy.url,
            path: '/bench/claim',
            connections: 1,
            durationS: ctx.opts.durationS,
            warmupS: ctx.opts.warmupS,
            keys: { kind: 'unique' },
            keyPrefix: `${ctx.runId}-claim-${s.label}-r${rep}`,
            body: REQUEST_BODY,
            statsUrl: null,
          });
          s.runs.push(r);
          ctx.log(`claim rep ${rep} ${s.label}: p50 ${r.latencyMs.p50} ms, p99 ${r.latencyMs.p99} ms, ${r.rps} req/s`);
        } catch (err) {
          s.error = message(err);
        }
      }
    }
  } finally {
    for (const s of sizes) await s.proxy?.stop();
    if (!ctx.opts.keepDb) for (const s of sizes) await dropDatabase(ctx.opts.adminUrl, s.db).catch(() => undefined);
  }
  const out: ClaimSize[] = sizes.map((s) => ({
    label: s.label,
    rows: s.rows,
    seedMs: s.seedMs,
    tableRows: s.tableRows,
    runs: s.runs,
    p50: median(s.runs.map((r) => r.latencyMs.p50)),
    p99: median(s.runs.map((r) => r.latencyMs.p99)),
    rps: median(s.runs.map((r) => r.rps)),
    error: s.error,
  }));
  const [small, big] = out;
  const ratio = small?.p50 && big?.p50 ? Number((big.p50 / small.p50).toFixed(3)) : null;
  return { sizes: out, p50Ratio: ratio, isFullTarget: ctx.opts.big, met: ratio === null ? null : ratio <= CLAIM_RATIO_LIMIT };
}
