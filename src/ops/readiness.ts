import type { Db } from '../store/db/port.js';
import { latestVersion, schemaVersion } from '../store/migrate.js';

// /readyz: ready while the key store answers and its schema is migrated, and
// not once a graceful shutdown began (so load balancers stop sending). A hung
// database answers "not ready" within the timeout instead of hanging the probe.

export interface ReadinessOptions {
  readonly timeoutMs?: number;
  readonly closing: () => boolean;
}

export function createReadiness(db: Db, opts: ReadinessOptions): () => Promise<string | null> {
  const timeoutMs = opts.timeoutMs ?? 2000;
  return async () => {
    if (opts.closing()) return 'shutting down: finishing in-flight requests';
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<string>((resolve) => {
      timer = setTimeout(() => resolve(`key store did not answer within ${timeoutMs} ms`), timeoutMs);
    });
    const check = schemaVersion(db).then(
      (v) => (v >= latestVersion ? null : `schema version ${v}, needs ${latestVersion} (run idempotency-proxy migrate)`),
      (err: Error) => `key store unreachable: ${err.message}`,
    );
    try {
      return await Promise.race([check, timeout]);
    } finally {
      clearTimeout(timer);
    }
  };
}
