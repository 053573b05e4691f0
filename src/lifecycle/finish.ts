import type { ErrorSource } from '../errors.js';
import type { Logger } from '../log/logger.js';
import { createRequestLog } from '../log/request-log.js';
import type { Metrics, Outcome } from '../metrics/metrics.js';
import type { RequestContext } from './context.js';

// The end of every request: its metrics and its one log line, both naming
// the route, the outcome, and on a failure the phase where it ended and who
// failed.

type Bound = { count: { inc(): void }; duration: { observe(v: number): void }; upstream: { observe(v: number): void } };

const SOURCE_OF: Partial<Record<Outcome, ErrorSource>> = {
  store_error: 'store',
  upstream_error: 'upstream',
  internal_error: 'internal',
};

export function createFinish(metrics: Metrics, logger: Logger): (ctx: RequestContext) => void {
  const requestLog = createRequestLog(logger);
  // Metric children bound once per (route name, outcome): no label lookup per request.
  const bound = new Map<string, Map<string, Bound>>();
  let lastRoute = '';
  let lastOutcome = '';
  let lastBound: Bound | null = null;
  const children = (route: string, outcome: string): Bound => {
    // Under load most requests share their route and outcome with the one before.
    if (route === lastRoute && outcome === lastOutcome && lastBound !== null) return lastBound;
    let byOutcome = bound.get(route);
    if (byOutcome === undefined) bound.set(route, (byOutcome = new Map()));
    let b = byOutcome.get(outcome);
    if (b === undefined) {
      b = {
        count: metrics.requests.labels(route, outcome),
        duration: metrics.requestDuration.labels(route, outcome),
        upstream: metrics.upstreamDuration.labels(route),
      };
      byOutcome.set(outcome, b);
    }
    lastRoute = route;
    lastOutcome = outcome;
    lastBound = b;
    return b;
  };

  return (ctx) => {
    const ms = ctx.elapsedMs();
    ctx.durationMs = ms;
    const route = ctx.route?.name ?? '(none)';
    const m = children(route, ctx.outcome);
    m.count.inc();
    m.duration.observe(ms / 1000);
    if (ctx.upstreamMs >= 0) m.upstream.observe(ctx.upstreamMs / 1000);
    const source = ctx.source ?? SOURCE_OF[ctx.outcome] ?? null;
    if (source !== null) {
      ctx.source = source;
      metrics.failures.inc({ route, phase: ctx.phase, source });
    }
    requestLog(ctx, route, ms);
  };
}
