import type { StoreConfig } from '../config/types.js';
import type { Logger } from '../log/logger.js';
import { createPgDb } from './db/pg.js';
import { createPgliteDb } from './db/pglite.js';
import type { Db } from './db/port.js';
import { prepareDataDir } from './data-dir.js';

/** PostgreSQL when a URL is configured, the embedded PGlite store otherwise. */
export async function openDb(cfg: StoreConfig, logger: Logger): Promise<Db> {
  if (cfg.postgres !== null) return pgPool(cfg, cfg.postgres, logger);
  logger.info({ dataDir: cfg.dataDir }, 'opening the embedded store (PGlite)');
  prepareDataDir(cfg.dataDir);
  return createPgliteDb(cfg.dataDir);
}

/**
 * A pool to another node of the same Citus cluster (src/store/citus/tenant-router.ts): the
 * configured URL — its user, password, database, TLS settings — with the node's host and port.
 */
export function openNodeDb(cfg: StoreConfig, host: string, port: number, logger: Logger): Db {
  const url = new URL(cfg.postgres!);
  url.hostname = host.includes(':') ? `[${host}]` : host;
  url.port = String(port);
  url.searchParams.delete('host');
  url.searchParams.delete('port');
  return pgPool(cfg, url.toString(), logger);
}

function pgPool(cfg: StoreConfig, connectionString: string, logger: Logger): Db {
  return createPgDb({
    connectionString,
    max: cfg.poolSize,
    idleTimeoutMs: cfg.idleTimeoutMs,
    timeoutMs: cfg.timeoutMs,
    preparedStatements: cfg.preparedStatements,
    onError: (err) => logger.warn({ err: err.message }, 'idle PostgreSQL connection lost'),
  });
}
