import { createHash } from 'node:crypto';
import path from 'node:path';
import { Redis } from 'ioredis';
import type { Counter } from 'prom-client';
import type { StoreConfig } from '../config/types.js';
import type { Logger } from '../log/logger.js';
import type { Metrics } from '../metrics/metrics.js';

// The Redis cache's settings, their defaults, its key prefix, and the ioredis
// client as the cache needs it (src/store/redis-cache.ts).

export interface RedisCacheOptions {
  readonly url: string;
  /** Key prefix; must not contain `{` or `}` (the tenant is the hash tag). Default: defaultCachePrefix(). */
  readonly prefix?: string;
  /** Client-side bound on every Redis command. */
  readonly commandTimeoutMs?: number;
  readonly connectTimeoutMs?: number;
  /** Cap on a completed record's TTL (it is also never longer than the row's retention). */
  readonly maxTtlMs?: number;
  /** Cap on an in-flight marker's TTL (it is also never longer than the lease). */
  readonly maxInFlightTtlMs?: number;
  /** Bodies larger than this are not cached (replays of them come from PostgreSQL). */
  readonly maxBodyBytes?: number;
  readonly breakerThreshold?: number;
  readonly breakerCoolDownMs?: number;
  /** ioredis enableAutoPipelining: batches commands issued in one tick. */
  readonly autoPipelining?: boolean;
}

export type RedisCacheTuning = Omit<RedisCacheOptions, 'url'>;

export interface RedisCacheDeps {
  readonly metrics: Metrics;
  readonly logger?: Logger;
  /** Wall clock (epoch ms) used for the validity stamps in values. */
  readonly now?: () => number;
}

export const CACHE_DEFAULTS = Object.freeze({
  prefix: 'idem:',
  commandTimeoutMs: 50,
  connectTimeoutMs: 1000,
  maxTtlMs: 3_600_000,
  maxInFlightTtlMs: 5000,
  maxBodyBytes: 512 * 1024,
  breakerThreshold: 5,
  breakerCoolDownMs: 1000,
  autoPipelining: false,
});

/** The options with every default filled in. */
export function cacheSettings(opts: RedisCacheOptions): Required<RedisCacheOptions> {
  return { ...CACHE_DEFAULTS, ...stripUndefined(opts) } as Required<RedisCacheOptions>;
}

export interface CacheCounts {
  readonly hit: Counter.Internal;
  readonly miss: Counter.Internal;
  readonly error: Counter.Internal;
  readonly skipped: Counter.Internal;
}

/** The cache counter's four children, bound once. */
export function cacheCounts(metrics: Metrics): CacheCounts {
  const c = metrics.cache;
  return { hit: c.labels('hit'), miss: c.labels('miss'), error: c.labels('error'), skipped: c.labels('skipped') };
}

/** The ioredis client: bounded commands, no offline queue, no retries, reconnecting for ever. */
export function createRedisClient(url: string, o: Required<RedisCacheOptions>): Redis {
  return new Redis(url, {
    commandTimeout: o.commandTimeoutMs,
    connectTimeout: o.connectTimeoutMs,
    // Never queue while disconnected and never retry a command: a cache
    // answer that comes late is worth nothing.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    enableAutoPipelining: o.autoPipelining,
    // Reconnect for ever, quickly: recovery is automatic.
    retryStrategy: (times) => Math.min(100 * times, 1000),
    connectionName: 'idempotency-proxy',
  });
}

/**
 * The default key prefix: `idem:` and a short id of the PostgreSQL database
 * (host, port, database name; never the credentials), so two deployments
 * that share one Redis never share cache entries, while every instance of
 * one deployment does.
 */
export function defaultCachePrefix(store: Pick<StoreConfig, 'postgres' | 'dataDir'>): string {
  let identity: string;
  if (store.postgres === null) identity = `embedded:${path.resolve(store.dataDir)}`;
  else {
    try {
      const u = new URL(store.postgres);
      identity = `${u.hostname}:${u.port || '5432'}${u.pathname}`;
    } catch {
      identity = 'postgres';
    }
  }
  return `idem:${createHash('sha256').update(identity).digest('hex').slice(0, 8)}:`;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}
