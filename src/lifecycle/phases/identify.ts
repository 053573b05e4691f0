import { Problems, type ProblemDef } from '../../http/problems.js';
import { fingerprint } from '../../policy/fingerprint.js';
import { parseJsonBody, type JsonValue } from '../../policy/json.js';
import { isKeyProblem, keyFromBody, keyFromHeader, type KeyProblem } from '../../policy/key.js';
import type { CompiledRoute } from '../../policy/router.js';
import { resolveTenant, tenantWithPath } from '../../policy/tenant.js';
import { NEXT, PASS_THROUGH, problem, type Phase } from '../verdict.js';

// Phase "identify": the key (header or JSON body field), the tenant and the
// fingerprint of the buffered request. No key on a route that does not
// require one: forwarded untouched. On a `key: { fromBody }` route a missing
// or unusable body key is always a 400 (there is no "no key" there).

const KEY_PROBLEMS: Record<KeyProblem['problem'], ProblemDef> = {
  'key-malformed': Problems.keyMalformed,
  'key-body-not-json': Problems.keyBodyNotJson,
  'key-pointer-missing': Problems.keyPointerMissing,
};

export const identifyPhase: Phase = {
  name: 'identify',
  run: (deps, ctx) => {
    const plan = ctx.plan!;
    const route = plan.route;
    const json: JsonValue | undefined = route.needsJson ? parseJsonBody(ctx.body) : undefined;
    const source = plan.policy.key;
    const key = source.kind === 'fromBody'
      ? keyFromBody(json, source.pointer, route.keyPointer!)
      : keyFromHeader(ctx.req.headers, ctx.req.rawHeaders, source.header);
    if (key === null) {
      if (!plan.policy.required) return PASS_THROUGH;
      return plan.strategy.answer(deps, ctx, problem(Problems.keyMissing, keyMissingDetail(route), 'rejected'), 'rejected');
    }
    if (isKeyProblem(key)) return plan.strategy.answer(deps, ctx, problem(KEY_PROBLEMS[key.problem], key.detail, 'rejected'), 'rejected');
    ctx.key = key;
    const tenantId = resolveTenant(plan.policy.tenant, ctx.req);
    ctx.tenantId = route.scopePath ? tenantWithPath(tenantId, ctx.path) : tenantId;
    ctx.fingerprint = fingerprint(route.fingerprint, ctx.method, ctx.path, ctx.query, ctx.req.headers, ctx.body, json);
    return NEXT;
  },
};

function keyMissingDetail(route: CompiledRoute): string {
  const k = route.policy.key;
  if (k.kind === 'fromBody') return `this route requires an idempotency key in the JSON body at ${k.pointer}`;
  return `this route requires an idempotency key in the ${k.header} header`;
}
