import type { CompiledRoute } from '../policy/router.js';
import { fingerprint } from '../policy/fingerprint.js';
import { parseJsonBody, type JsonValue } from '../policy/json.js';
import { isKeyProblem, keyFromBody, keyFromHeader, type KeyProblem } from '../policy/key.js';
import { resolveTenant } from '../policy/tenant.js';
import type { RequestContext } from './context.js';

// Phase "identify": key, tenant and fingerprint of a buffered request.

export type Identity =
  | { readonly kind: 'keyed'; readonly key: string; readonly tenantId: string; readonly fingerprint: Buffer }
  | { readonly kind: 'unkeyed' }
  | { readonly kind: 'invalid'; readonly problem: KeyProblem };

export function identify(ctx: RequestContext, route: CompiledRoute, body: Buffer): Identity {
  const policy = route.policy;
  const json: JsonValue | undefined = route.needsJson ? parseJsonBody(body) : undefined;
  const source = policy.key;
  const key = source.kind === 'fromBody'
    ? keyFromBody(json, source.pointer)
    : keyFromHeader(ctx.req.headers, ctx.req.rawHeaders, source.header);
  if (key === null) return { kind: 'unkeyed' };
  if (isKeyProblem(key)) return { kind: 'invalid', problem: key };
  const tenantId = resolveTenant(policy.tenant, ctx.req.headers);
  const fp = fingerprint(route.fingerprint, ctx.method, ctx.path, ctx.query, ctx.req.headers, body, json);
  return { kind: 'keyed', key, tenantId, fingerprint: fp };
}
