import { NEXT, PASS_THROUGH, type SyncPhase } from '../verdict.js';

// Phase "route": the first route in YAML order whose `match` fits
// (src/policy/router.ts). Unmatched requests, `mode: passthrough` routes and
// methods outside the route's `methods` are forwarded untouched, with no
// promise in between: that path is as short as a bare proxy's.

export const routePhase: SyncPhase = {
  name: 'route',
  run: (deps, ctx) => {
    const plans = deps.plans;
    const route = plans.router.match(ctx.method, ctx.path);
    ctx.route = route;
    if (route === null || !route.idemMethods.has(ctx.method)) return PASS_THROUGH;
    const plan = plans.of(route);
    if (plan === null) return PASS_THROUGH;
    ctx.plan = plan;
    return NEXT;
  },
};
