import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';

// The admin listener: /metrics, /healthz, /readyz. Loopback by default;
// an optional bearer token guards every path.

export interface AdminDeps {
  readonly registry: Registry;
  readonly token: string | null;
  /** Resolves to null when ready, or a reason when not. */
  readonly ready: () => Promise<string | null>;
}

export function createAdminHandler(deps: AdminDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const expected = deps.token === null ? null : `Bearer ${deps.token}`;
  const json = (res: ServerResponse, status: number, body: unknown): void => {
    const s = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(s), 'cache-control': 'no-store' });
    res.end(s);
  };
  return (req, res) => {
    if (expected !== null && req.headers.authorization !== expected) {
      json(res, 401, { status: 'unauthorized' });
      return;
    }
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/healthz') {
      json(res, 200, { status: 'ok' });
    } else if (path === '/readyz') {
      deps.ready().then(
        (reason) => json(res, reason === null ? 200 : 503, reason === null ? { status: 'ready' } : { status: 'unready', reason }),
        (err: Error) => json(res, 503, { status: 'unready', reason: err.message }),
      );
    } else if (path === '/metrics') {
      deps.registry.metrics().then(
        (text) => {
          res.writeHead(200, { 'content-type': deps.registry.contentType });
          res.end(text);
        },
        (err: Error) => json(res, 500, { error: err.message }),
      );
    } else {
      json(res, 404, { status: 'not found', paths: ['/metrics', '/healthz', '/readyz'] });
    }
  };
}
