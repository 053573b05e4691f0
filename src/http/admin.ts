import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import { createKeysApi, type KeysApiDeps } from './admin-keys.js';

// The admin listener: /metrics, /healthz, /readyz, and the key API under
// /admin/keys (./admin-keys.ts; docs/operations.md). Loopback by default.
// With an admin token, every path requires `Authorization: Bearer <token>`
// except the two probes: kubelet and Docker health checks carry no secret,
// so /healthz and /readyz answer without it, and /readyz names the reason it
// is not ready only to an authorized caller.

export interface AdminDeps {
  readonly registry: Registry;
  readonly token: string | null;
  /** Resolves to null when ready, or a reason when not. */
  readonly ready: () => Promise<string | null>;
  /** The key API; absent: /admin/keys is not served. */
  readonly keys?: Omit<KeysApiDeps, 'token'>;
}

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

export function createAdminHandler(deps: AdminDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const expected = deps.token === null ? null : digest(`Bearer ${deps.token}`);
  const authorized = (req: IncomingMessage): boolean => {
    if (expected === null) return true;
    const given = req.headers.authorization;
    return given !== undefined && timingSafeEqual(digest(given), expected);
  };
  const json = (res: ServerResponse, status: number, body: unknown, extra: Record<string, string> = {}): void => {
    const s = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(s), 'cache-control': 'no-store', ...extra });
    res.end(s);
  };
  const keys = deps.keys === undefined ? null : createKeysApi({ ...deps.keys, token: deps.token });
  return (req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    if (path === '/healthz') {
      json(res, 200, { status: 'ok' });
      return;
    }
    const ok = authorized(req);
    if (keys !== null && (path === '/admin/keys' || path.startsWith('/admin/keys/'))) {
      keys(req, res, path, ok);
      return;
    }
    if (path === '/readyz') {
      const unready = (reason: string): void => json(res, 503, ok ? { status: 'unready', reason } : { status: 'unready' });
      deps.ready().then(
        (reason) => (reason === null ? json(res, 200, { status: 'ready' }) : unready(reason)),
        (err: Error) => unready(err.message),
      );
      return;
    }
    if (!ok) {
      json(res, 401, { status: 'unauthorized', detail: 'this path requires Authorization: Bearer <adminToken>' }, { 'www-authenticate': 'Bearer realm="idempotency-proxy admin"' });
      return;
    }
    if (path === '/metrics') {
      deps.registry.metrics().then(
        (text) => {
          res.writeHead(200, { 'content-type': deps.registry.contentType, 'cache-control': 'no-store' });
          res.end(text);
        },
        (err: Error) => json(res, 500, { error: err.message }),
      );
    } else {
      json(res, 404, { status: 'not found', paths: ['/metrics', '/healthz', '/readyz', ...(keys === null ? [] : ['/admin/keys'])] });
    }
  };
}
