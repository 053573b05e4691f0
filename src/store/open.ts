import type { StoreConfig } from '../config/types.js';
import type { Logger } from '../log/logger.js';
import { createPgDb } from './db/pg.js';
import { createPgliteDb } from './db/pglite.js';
import type { Db } from './db/port.js';
import { prepareDataDir } from './data-dir.js';

/** PostgreSQL when a URL is configured, the embedded PGlite store otherwise. */
export async function openDb(cfg: StoreConfig, logger: Logger): Promise<Db> {
  if (cfg.postgres !== null) {
    return createPgDb({
      connectionString: cfg.postgres,
      max: cfg.poolSize,
      timeoutMs: cfg.timeoutMs,
      preparedStatements: cfg.preparedStatements,
      onError: (err) => logger.warn({ err: err.message }, 'idle PostgreSQL connection lost'),
    });
  }
  logger.info({ dataDir: cfg.dataDir }, 'opening the embedded store (PGlite)');
  prepareDataDir(cfg.dataDir);
  return createPgliteDb(cfg.dataDir);
}
