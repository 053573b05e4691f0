import type { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';
import { respond } from './respond.js';
import { NEXT, type Phase, type Verdict } from './verdict.js';

// Runs a route's phases in order until one answers, then the respond phase.
// A phase that answers synchronously is not awaited. A key this request
// claimed is let go (heartbeat stopped, waiters woken) and the bytes it held
// in the memory budget are given back, however it ended.

export async function runPipeline(deps: LifecycleDeps, ctx: RequestContext, phases: readonly Phase[]): Promise<void> {
  try {
    let v: Verdict = NEXT;
    for (let i = 0; i < phases.length && v === NEXT; i++) {
      const phase = phases[i]!;
      ctx.phase = phase.name;
      const r = phase.run(deps, ctx);
      v = r instanceof Promise ? await r : r;
    }
    if (v === NEXT) throw new Error(`the ${ctx.phase} phase was the last and did not answer`);
    const done = respond(deps, ctx, v);
    if (done !== undefined) await done;
  } finally {
    ctx.hold?.end();
    const held = ctx.buffered + (ctx.exchange?.buffered ?? 0);
    if (held !== 0) deps.budget.give(held);
  }
}
