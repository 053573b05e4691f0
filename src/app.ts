import type { DestinationStream } from 'pino';
import type { Config } from './config/types.js';
import { createAdminHandler } from './http/admin.js';
import { isLoopbackHost } from './http/admin-keys.js';
import { listen, type Listener } from './http/server.js';
import { createHandler } from './lifecycle/handler.js';
import { MemoryBudget } from './lifecycle/budget.js';
import { Plans } from './lifecycle/plan.js';
import { Waiters } from './lifecycle/waiters.js';
import { StoreHealth } from './lifecycle/estimate.js';
import { createLogger, type Logger } from './log/logger.js';
import { createMetrics, type Metrics } from './metrics/metrics.js';
import { Router } from './policy/router.js';
import { createUpstream } from './proxy/upstream.js';
import { openDb, openNodeDb } from './store/open.js';
import { TenantRouter } from './store/citus/tenant-router.js';
import type { Db } from './store/db/port.js';
import { KeyStore } from './store/key-store.js';
import { latestVersion, migrate, onCitus, schemaVersion } from './store/migrate.js';
import { startSweeper } from './store/sweeper.js';
import type { ReplayCache } from './store/cache.js';
import { createRedisCache, defaultCachePrefix, type RedisCacheTuning } from './store/redis-cache.js';
import { maskUrl } from './config/mask.js';
import { drainServer } from './ops/drain.js';
import { InstrumentedKeyStore } from './ops/instrumented-store.js';
import { createReadiness } from './ops/readiness.js';
import { planReload } from './ops/reload-plan.js';
import { tlsReloader } from './ops/tls-reload.js';
import { tlsRefusals } from './ops/tls-refusals.js';
import { readListenTls } from './config/tls-files.js';
import type { LifecycleDeps } from './lifecycle/deps.js';
import { startKeyCensus } from './admin/census.js';
import { GiveBacks } from './lifecycle/give-back.js';
import { KeyOperations } from './admin/keys.js';
import type { StartedTracing } from './tracing/start.js';

// The composition root: the one place that builds pools, cache, logger and
// metrics and passes them in. No module reaches for a global.

export interface StartOptions {
  readonly logger?: Logger;
  readonly logDestination?: DestinationStream;
  /** Shutdown deadline for in-flight requests (beats config.shutdownTimeoutMs). */
  readonly shutdownDeadlineMs?: number;
  /** Redis cache tuning (key prefix, timeouts, breaker); used when config.store.redis is set. */
  readonly redisCache?: RedisCacheTuning;
  /** The key census behind the outcome-unknown and oldest-in-flight gauges (tests shorten it); src/admin/census.ts. */
  readonly census?: { readonly intervalMs?: number; readonly chunkRows?: number };
  /**
   * Wraps the opened store before anything uses it. Tests only: a store whose every statement still runs on the
   * real database, some of whose answers arrive late (test/faults/batch-give-back.test.ts).
   */
  readonly wrapDb?: (db: Db) => Db;
}

/** Key census: one chunk of at most this many rows per tick (docs/operations.md, Metrics). */
const CENSUS_DEFAULTS = { intervalMs: 5_000, chunkRows: 10_000 };
/** How often the Citus shard map is read again (src/store/citus/tenant-router.ts). */
const SHARD_MAP_REFRESH_MS = 30_000;

export interface RunningProxy {
  readonly url: string;
  readonly adminUrl: string | null;
  /** The running configuration (routes as last reloaded). */
  readonly config: Config;
  readonly store: KeyStore;
  readonly db: Db;
  readonly metrics: Metrics;
  readonly logger: Logger;
  /** Graceful: stop accepting, finish and commit in-flight requests, close pools. */
  close(): Promise<void>;
  /**
   * SIGHUP: swaps in routes, policies and live settings of `next` for new
   * requests (in-flight requests keep their route). Settings that need a
   * restart keep their running values and are listed. Throws if the new
   * routes cannot be compiled; the running configuration is then kept.
   */
  reload(next: Config): ReloadResult;
}

export interface ReloadResult {
  readonly routes: readonly string[];
  /** Live settings that changed (`routes`, `logLevel`, `shutdownTimeout`, `listen.tls`: the files' contents). */
  readonly changed: readonly string[];
  /** Changed settings that need a restart, as YAML paths (`upstream.url`). */
  readonly restartNeeded: readonly string[];
}

export async function startProxy(config: Config, opts: StartOptions = {}): Promise<RunningProxy> {
  const logger = opts.logger ?? createLogger(config.logLevel, opts.logDestination);
  const metrics = createMetrics();
  const opened = await openDb(config.store, logger);
  const db = opts.wrapDb === undefined ? opened : opts.wrapDb(opened);
  const cleanups: Array<() => Promise<void> | void> = [() => db.close()];
  try {
    if (config.store.migrate) {
      const m = await migrate(db);
      if (m.applied.length > 0) logger.info({ applied: m.applied.map((x) => `${x.version}_${x.name}`) }, 'schema migrated');
      if (m.distributed.length > 0) logger.info({ distributed: m.distributed }, 'tables distributed on citus');
    } else {
      const v = await schemaVersion(db);
      if (v < latestVersion) {
        throw new Error(`the database schema is at version ${v}, this proxy needs ${latestVersion}: run "idempotency-proxy migrate" first (or start without store.migrate: false)`);
      }
    }
    // A batch of several tenants as one statement, except on Citus (one tenant, one shard); there
    // a lone key is claimed by single-row statements, which Citus plans once (docs/scale.md).
    const citus = await onCitus(db);
    // On Citus each tenant's statements go to the node of its shard (store.shardRouting).
    let tenantRouter: TenantRouter | null = null;
    if (citus && config.store.shardRouting) {
      const router = new TenantRouter({
        coordinator: db,
        connect: (host, port) => openNodeDb(config.store, host, port, logger),
        refreshMs: SHARD_MAP_REFRESH_MS,
        log: (level, fields, msg) => logger[level](fields, msg),
      });
      cleanups.push(() => router.close());
      await router.start();
      tenantRouter = router;
      logger.info(router.describe(), 'citus: statements go to the node of each tenant\'s shard');
    }
    const store: KeyStore = new InstrumentedKeyStore(db, metrics, {
      crossTenantBatches: !citus,
      perKeyStatements: citus,
      ...(tenantRouter === null ? {} : { tenantDb: (tenantId: string) => tenantRouter.forTenant(tenantId) }),
    });
    const router = new Router(config);
    const upstream = createUpstream(config.upstream);
    metrics.upstreamPool.watch(upstream.counts);
    let forcedShutdown = false;
    // After a forced shutdown, upstream calls still running are aborted rather than awaited.
    cleanups.push(() => (forcedShutdown ? upstream.pool.destroy() : upstream.close()));
    const cache: ReplayCache | null = await openCache(config, opts, metrics, logger);
    if (cache !== null) cleanups.push(() => cache.close());
    const giveBacks = new GiveBacks(store, cache, logger, metrics);
    metrics.keysToGiveBack.watch(() => giveBacks.size);
    cleanups.push(() => giveBacks.close());
    warnTradeOffs(config, logger);

    // Routes and policies are swapped whole on reload: a request reads the plans once, at its route phase.
    const hasCache = cache !== null;
    const budget = new MemoryBudget(config.limits.maxBufferedBytes);
    metrics.bufferedBytes.watch(() => budget.held);
    let live = { config, plans: new Plans(router, { cache: hasCache }) };
    const tracing = await openTracing(config, metrics, logger);
    if (tracing !== null) {
      // An unreachable collector loses the last spans, never the shutdown.
      cleanups.push(() => tracing.shutdown().catch((e: unknown) => logger.warn({ err: (e as Error).message }, 'tracing: the last spans could not be exported')));
    }
    const timeouts = config.listenTimeouts;
    const deps: LifecycleDeps = {
      get plans() { return live.plans; },
      store, cache, upstream, logger, metrics, waiters: new Waiters(), budget, storeHealth: new StoreHealth(), tracing: tracing?.tracing ?? null, giveBacks,
      sendTimeoutMs: timeouts.sendTimeoutMs,
    };
    const handler = createHandler(deps);
    const sweeper = startSweeper(db, {
      intervalMs: config.store.sweepIntervalMs,
      batchSize: config.store.sweepBatchSize,
      onResult: (r) => {
        if (r.deleted > 0 || r.steps > 0) {
          metrics.sweeperDeleted.inc(r.deleted);
          logger.info({ deleted: r.deleted, steps: r.steps }, 'sweeper deleted expired records');
        }
      },
      onError: (e) => logger.warn({ err: (e as Error).message }, 'sweeper failed'),
    });
    cleanups.push(() => sweeper.stop());
    const census = startKeyCensus(db, {
      ...CENSUS_DEFAULTS, ...opts.census,
      onPass: (r) => metrics.keyCensus.publish(r.outcomeUnknown, r.oldestBornAt),
      onError: (e) => logger.warn({ err: (e as Error).message }, 'key census failed'),
    });
    cleanups.push(() => census.stop());

    const listenTls = config.listenTls === null ? null : readListenTls(config.listenTls);
    const main = await listen(handler, config.listen.host, config.listen.port, timeouts, {
      tls: listenTls, http2: config.http2, ...(listenTls === null ? {} : { onTlsError: tlsRefusals(logger, metrics.tlsRefused).onError }),
    });
    const certificates = tlsReloader(readListenTls, (m) => main.setSecureContext(m), listenTls);
    cleanups.push(() => { if (main.server.listening) main.server.close(); });
    let closing: Promise<void> | null = null;
    let admin: Listener | null = null;
    if (config.admin !== null) {
      const adminHandler = createAdminHandler({
        registry: metrics.registry,
        token: config.adminToken,
        ready: createReadiness(db, { closing: () => closing !== null }),
        keys: { ops: new KeyOperations(db, store), cache, logger, host: config.admin.host },
      });
      admin = await listen(adminHandler, config.admin.host, config.admin.port);
      if (config.adminToken === null && !isLoopbackHost(config.admin.host)) {
        logger.warn({ admin: admin.url }, 'admin key API (/admin/keys) is off: the admin listener is not on loopback and no adminToken is set');
      }
    }
    if (db.singleInstance) {
      logger.warn({ store: db.description },
        'embedded store: single-instance only; every proxy instance must share one PostgreSQL (set store.postgres or DATABASE_URL) for production');
    }
    logger.info({ url: main.url, adminUrl: admin?.url ?? null, upstream: config.upstream.url, store: db.description, routes: router.routes.map((r) => r.name) }, 'proxy listening');
    logger.flush(); // the line tooling waits for: never left in the buffer

    return {
      url: main.url,
      adminUrl: admin?.url ?? null,
      get config() { return live.config; },
      store,
      db,
      metrics,
      logger,
      close: () => (closing ??= (async () => {
        // /readyz answers 503 from here on; the admin listener stays up while draining.
        const deadlineMs = opts.shutdownDeadlineMs ?? live.config.shutdownTimeoutMs;
        const drained = await drainServer(main.server, { deadlineMs, idle: () => metrics.inFlight.whenIdle(), h2: main.h2 });
        forcedShutdown = drained.forced;
        if (drained.forced) {
          logger.warn({ deadlineMs, keysInFlight: metrics.inFlight.count },
            'shutdown deadline passed: remaining connections cut; keys still in flight stay claimed until their lease ends');
        } else {
          logger.info({ ms: Math.round(drained.ms) }, 'in-flight requests finished');
        }
        await admin?.close(1000);
        for (const c of cleanups.reverse()) await c();
      })()),
      reload: (next) => {
        const plan = planReload(live.config, next);
        const nextRouter = new Router(plan.config);
        // Certificates last of what can fail: a rejected reload changes nothing.
        const tlsChanged = certificates.reload(plan.config.listenTls);
        const upstreamTlsChanged = upstream.tls.reload(plan.config.upstream.tls);
        live = { config: plan.config, plans: new Plans(nextRouter, { cache: hasCache }) };
        if (opts.logger === undefined && logger.level !== plan.config.logLevel) logger.level = plan.config.logLevel;
        if (plan.changed.includes('routes') || plan.changed.includes('shutdownTimeout')) warnTradeOffs(plan.config, logger);
        const changed = [...plan.changed, ...(tlsChanged ? ['listen.tls'] : []), ...(upstreamTlsChanged ? ['upstream.tls'] : [])];
        return { routes: nextRouter.routes.map((r) => r.name), changed, restartNeeded: plan.restartNeeded };
      },
    };
  } catch (err) {
    for (const c of cleanups.reverse()) await c();
    throw err;
  }
}

/** The Redis lookaside cache, when configured. Never fails the start: Redis is optional. */
async function openCache(config: Config, opts: StartOptions, metrics: Metrics, logger: Logger): Promise<ReplayCache | null> {
  const url = config.store.redis;
  if (url === null) return null;
  const cache = createRedisCache({ prefix: defaultCachePrefix(config.store), ...opts.redisCache, url }, { metrics, logger });
  const where = { redis: maskUrl(url), prefix: cache.prefix };
  if (await cache.ready(1000)) logger.info(where, 'redis cache connected');
  else logger.warn(where, 'redis cache not reachable at start: serving from PostgreSQL until it is');
  return cache;
}

/** Tracing's modules (the recorder, OpenTelemetry's export delegate, the OTLP/HTTP transport) are imported only when tracing is on (docs/operations.md, Tracing). */
async function openTracing(config: Config, metrics: Metrics, logger: Logger): Promise<StartedTracing | null> {
  if (!config.tracing.enabled) return null;
  const { startTracing } = await import('./tracing/start.js');
  // Lost spans are counted (idempotency_proxy_tracing_spans_lost_total) and logged at most every 10 s, with how many since the last line.
  let lost = 0;
  let lastWarned = 0;
  const t = startTracing(config.tracing, {
    onLoss: (spans, cause, reason) => {
      metrics.tracingSpansLost.inc({ cause }, spans);
      lost += spans;
      const now = Date.now();
      if (now - lastWarned < 10_000) return;
      lastWarned = now;
      logger.warn({ spans: lost, reason }, 'tracing: spans lost');
      lost = 0;
    },
  });
  const endpoint = config.tracing.endpoint ?? process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? process.env.OTEL_EXPORTER_OTLP_ENDPOINT ?? null;
  const { maxBatch, maxQueue } = t.batch;
  logger.info({ endpoint: endpoint === null ? null : maskUrl(endpoint), protocol: config.tracing.protocol, sampler: t.sampler.description, maxBatch, maxQueue }, 'tracing on: exporting spans over OTLP/HTTP');
  // Spans being sent count against the queue: with room for less than two batches, spans recorded while one is sent are dropped.
  if (maxQueue < 2 * maxBatch) {
    logger.warn({ maxBatch, maxQueue }, 'tracing: OTEL_BSP_MAX_QUEUE_SIZE holds less than two export batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE): spans recorded while a batch is sent are dropped; make the queue at least twice the batch');
  }
  return t;
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
  // A lease is extended at a third of it, and an extension may take up to store.timeout to land: past 2/3 of the lease it may land too late.
  const storeMs = config.store.timeoutMs;
  const short = config.store.postgres === null ? [] : config.routes.filter((r) => r.mode !== 'passthrough' && r.leaseMs * 2 < storeMs * 3).map((r) => r.name);
  if (short.length > 0) {
    logger.warn({ routes: short, storeTimeoutMs: storeMs },
      'lease shorter than 1.5 × store.timeout on these routes: an extension the store answers slowly can land after the lease ran out, and a retry that came meanwhile runs the operation again');
  }
  // At the shutdown deadline the requests still running are cut; their keys stay claimed until the lease ends.
  if (config.shutdownTimeoutMs < config.upstream.timeoutMs && config.routes.some((r) => r.mode !== 'passthrough')) {
    logger.warn({ shutdownTimeoutMs: config.shutdownTimeoutMs, upstreamTimeoutMs: config.upstream.timeoutMs },
      'shutdownTimeout is shorter than upstream.timeout: at shutdown a request whose upstream answers slower than shutdownTimeout is cut off, its key stays claimed until its lease runs out, and then (onExpiredLease) a retry may run the operation again');
  }
}
