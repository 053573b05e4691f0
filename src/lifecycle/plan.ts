import type { RoutePolicy } from '../config/types.js';
import type { Dialect } from '../http/dialects.js';
import type { CompiledRoute, Router } from '../policy/router.js';
import { claimPhase } from './phases/claim.js';
import { commitPhase } from './phases/commit.js';
import { bodyPhase } from './phases/body.js';
import { forwardPhase } from './phases/forward.js';
import { identifyPhase } from './phases/identify.js';
import { lookasidePhase } from './phases/lookaside.js';
import { probePhase } from './phases/probe.js';
import { DurationEstimate } from './estimate.js';
import { enforce, shadow, type Strategy } from './strategy.js';
import type { Phase } from './verdict.js';

// Routes compiled into what the request path runs: the phases after route,
// and the strategy (enforce or shadow) that decides what a refusal or a
// duplicate's answer becomes. Built at start-up and on reload, never per
// request: a feature a route does not use costs nothing on its path.

export interface RoutePlan {
  readonly route: CompiledRoute;
  readonly policy: RoutePolicy;
  readonly strategy: Strategy;
  /** The phases after route, in order; the last one always answers. */
  readonly phases: readonly Phase[];
  /** The route's recent upstream durations: the Retry-After of its 409s (src/lifecycle/estimate.ts). */
  readonly durations: DurationEstimate;
  /** The body shape and headers of this route's own answers (src/http/dialects.ts), chosen here once. */
  readonly dialect: Dialect;
}

export class Plans {
  private readonly byRoute = new Map<CompiledRoute, RoutePlan>();

  constructor(readonly router: Router, opts: { readonly cache: boolean }) {
    for (const route of router.routes) {
      if (!route.idempotent) continue;
      // Shadow routes skip the lookaside: every request of theirs is claimed and recorded.
      const lookaside = opts.cache && !route.shadow;
      // onExpiredLease: probe — the probe phase after the claim; shadow routes never probe (they forward every request).
      const probe = route.probe !== null && !route.shadow;
      const phases = [bodyPhase, identifyPhase, ...(lookaside ? [lookasidePhase] : []), claimPhase, ...(probe ? [probePhase] : []), forwardPhase, commitPhase];
      this.byRoute.set(route, { route, policy: route.policy, strategy: route.shadow ? shadow : enforce, phases, durations: new DurationEstimate(), dialect: route.dialect });
    }
  }

  /** The plan of an idempotent route, or null: forwarded untouched. */
  of(route: CompiledRoute): RoutePlan | null {
    return this.byRoute.get(route) ?? null;
  }
}
