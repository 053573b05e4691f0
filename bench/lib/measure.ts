// The repetitions: every step of the plan, in order, --reps times; each step
// one load-generator process against one long-lived server. Before them, a
// priming round (BENCH_PRIME seconds a step, not counted) gives every server
// the same first round: a server's first run under load is its JIT warm-up,
// and the proxy, with more code to compile than the baseline, lost up to a
// third of its first run to it (bench/README.md, Method; history: 2026-11-30 13:44).
import type { ServerHandle } from './children.js';
import { REQUEST_BODY, type BenchContext } from './context.js';
import type { Plan } from './plan.js';
import { H2_CONNECTIONS, H2_STREAMS, type ServerId } from './scenarios.js';
import type { RunRecord } from './summary.js';

export async function runRepetitions(
  ctx: BenchContext,
  plan: Plan,
  servers: ReadonlyMap<ServerId, ServerHandle>,
  statsUrl: string,
): Promise<RunRecord[]> {
  const runs: RunRecord[] = [];
  for (let rep = ctx.opts.primeS > 0 ? 0 : 1; rep <= ctx.opts.reps; rep += 1) {
    const priming = rep === 0;
    for (const { scenario: s, seq } of plan.steps) {
      if (ctx.interrupted()) return runs;
      const server = servers.get(s.server);
      if (server === undefined) continue; // unavailable; reported once by the caller
      const base = { scenario: s.id, rep, seq, connections: s.connections };
      if (!server.alive()) {
        if (!priming) runs.push({ ...base, result: null, error: `${server.name} is no longer running` });
        continue;
      }
      const label = priming ? `priming ${s.id}` : `rep ${rep}/${ctx.opts.reps} ${s.id}`;
      const counted = priming ? ' (not counted)' : '';
      try {
        const result = await ctx.load.cannon({
          mode: 'cannon',
          origin: server.url,
          path: s.path,
          ...(s.protocol === undefined ? {} : { protocol: s.protocol }),
          ...(s.protocol === 'h2' ? { h2: { connections: H2_CONNECTIONS, streams: H2_STREAMS } } : {}),
          connections: s.connections,
          durationS: priming ? ctx.opts.primeS : ctx.opts.durationS,
          warmupS: priming ? 0 : ctx.opts.warmupS,
          keys: s.keys,
          keyPrefix: s.keys.kind === 'fixed' ? `${ctx.runId}-${s.id}` : `${ctx.runId}-${s.id}-r${rep}-s${seq}`,
          body: REQUEST_BODY,
          statsUrl,
        });
        if (!priming) runs.push({ ...base, result, error: null });
        const other = result.non2xx + result.errors > 0 ? `, non-2xx ${result.non2xx}, errors ${result.errors}` : '';
        ctx.log(`${label}: ${result.rps} req/s, p50 ${result.latencyMs.p50} ms, p99 ${result.latencyMs.p99} ms${other}${counted}`);
      } catch (err) {
        const error = err instanceof Error ? err.message : String(err);
        if (!priming) runs.push({ ...base, result: null, error });
        ctx.log(`${label}: failed: ${error}${counted}`);
      }
    }
  }
  return runs;
}
