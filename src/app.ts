import type { DestinationStream } from 'pino';
import type { Config } from './config/types.js';
import { createAdminHandler } from './http/admin.js';
import { listen, type Listener } from './http/server.js';
import { createHandler } from './lifecycle/handler.js';
import { Waiters } from './lifecycle/waiters.js';
import { createLogger, type Logger } from './log/logger.js';
import { createMetrics, type Metrics } from './metrics/metrics.js';
import { Router } from './policy/router.js';
import { createUpstream } from './proxy/upstream.js';
import { openDb } from './store/open.js';
import type { Db } from './store/db/port.js';
import { KeyStore } from './store/key-store.js';
import { latestVersion, migrate, schemaVersion } from './store/migrate.js';
import { startSweeper } from './store/sweeper.js';
import type { ReplayCache } from './store/cache.js';

// The composition root: the one place that builds pools, cache, logger and
// metrics and passes them in. No module reaches for a global.

export interface StartOptions {
  readonly logger?: Logger;
  readonly logDestination?: DestinationStream;
  /** Shutdown deadline for in-flight requests. */
  readonly shutdownDeadlineMs?: number;
}

export interface RunningProxy {
  readonly url: string;
  readonly adminUrl: string | null;
  readonly config: Config;
  readonly store: KeyStore;
  readonly db: Db;
  readonly metrics: Metrics;
  readonly logger: Logger;
  /** Graceful: stop accepting, finish and commit in-flight requests, close pools. */
  close(): Promise<void>;
}

export async function startProxy(config: Config, opts: StartOptions = {}): Promise<RunningProxy> {
  const logger = opts.logger ?? createLogger(config.logLevel, opts.logDestination);
  const metrics = createMetrics();
  const db = await openDb(config.store, logger);
  const cleanups: Array<() => Promise<void> | void> = [() => db.close()];
  try {
    if (config.store.migrate) {
      const m = await migrate(db);
      if (m.applied.length > 0) logger.info({ applied: m.applied.map((x) => `${x.version}_${x.name}`) }, 'schema migrated');
    } else {
      const v = await schemaVersion(db);
      if (v < latestVersion) {
        throw new Error(`the database schema is at version ${v}, this proxy needs ${latestVersion}: run "idempotency-proxy migrate" first (or start without store.migrate: false)`);
      }
    }
    const store = new KeyStore(db);
    const router = new Router(config);
    const upstream = createUpstream(config.upstream);
    cleanups.push(() => upstream.close());
    const cache: ReplayCache | null = null;
    warnTradeOffs(config, logger);

    const handler = createHandler({ config, router, store, cache, upstream, logger, metrics, waiters: new Waiters() });
    const sweeper = startSweeper(db, {
      intervalMs: config.store.sweepIntervalMs,
      batchSize: config.store.sweepBatchSize,
      onResult: (r) => {
        if (r.deleted > 0) {
          metrics.sweeperDeleted.inc(r.deleted);
          logger.info({ deleted: r.deleted }, 'sweeper deleted expired records');
        }
      },
      onError: (e) => logger.warn({ err: (e as Error).message }, 'sweeper failed'),
    });
    cleanups.push(() => sweeper.stop());

    const main = await listen(handler, config.listen.host, config.listen.port);
    let admin: Listener | null = null;
    if (config.admin !== null) {
      const adminHandler = createAdminHandler({
        registry: metrics.registry,
        token: config.adminToken,
        ready: async () => {
          try {
            const v = await schemaVersion(db);
            return v >= latestVersion ? null : `schema version ${v}, needs ${latestVersion} (run idempotency-proxy migrate)`;
          } catch (err) {
            return `key store unreachable: ${(err as Error).message}`;
          }
        },
      });
      admin = await listen(adminHandler, config.admin.host, config.admin.port);
    }
    if (db.singleInstance) {
      logger.warn({ store: db.description },
        'embedded store: single-instance only; every proxy instance must share one PostgreSQL (set store.postgres or DATABASE_URL) for production');
    }
    logger.info({ url: main.url, adminUrl: admin?.url ?? null, upstream: config.upstream.url, store: db.description, routes: router.routes.map((r) => r.name) }, 'proxy listening');

    const deadline = opts.shutdownDeadlineMs ?? 30_000;
    let closing: Promise<void> | null = null;
    return {
      url: main.url,
      adminUrl: admin?.url ?? null,
      config,
      store,
      db,
      metrics,
      logger,
      close: () => (closing ??= (async () => {
        await Promise.all([main.close(deadline), admin?.close(1000)]);
        for (const c of cleanups.reverse()) await c();
      })()),
    };
  } catch (err) {
    for (const c of cleanups.reverse()) await c();
    throw err;
  }
}

function warnTradeOffs(config: Config, logger: Logger): void {
  const release = config.routes.filter((r) => r.mode !== 'passthrough' && r.onUnknownOutcome === 'release').map((r) => r.name);
  const pass = config.routes.filter((r) => r.mode !== 'passthrough' && r.onStoreError === 'passthrough').map((r) => r.name);
  if (release.length > 0) {
    logger.warn({ routes: release }, 'onUnknownOutcome: release on these routes: after an upstream timeout or reset, a retry runs the operation again');
  }
  if (pass.length > 0) {
    logger.warn({ routes: pass }, 'onStoreError: passthrough on these routes: while the key store is unreachable, requests are forwarded without deduplication');
  }
}
