import type { Redis } from 'ioredis';
import { maskUrl } from '../config/mask.js';
import type { Logger } from '../log/logger.js';
import type { CacheHit, ReplayCache } from './cache.js';
import { cacheKey, decode, encodeComplete, encodeInFlight } from './cache-codec.js';
import { CircuitBreaker } from './circuit-breaker.js';
import { Batcher } from './batcher.js';
import type { StoredResponse } from './records.js';
import { cacheCounts, cacheSettings, createRedisClient, type CacheCounts, type RedisCacheDeps, type RedisCacheOptions } from './redis-options.js';

export { CACHE_DEFAULTS, defaultCachePrefix, type RedisCacheDeps, type RedisCacheOptions, type RedisCacheTuning } from './redis-options.js';

// The Redis lookaside cache (docs/cache.md). It may make the proxy
// faster, never change a decision: every failure is a miss (lookup) or a
// dropped write, counted, and a breaker stops asking a Redis that keeps
// failing. Nothing here throws into the request lifecycle.

/**
 * Taken off a completed record's remaining retention: the commit's answer
 * and the SET travel a little after the database computed it.
 */
const TTL_SAFETY_MS = 100;
/** Below this a record is not worth a SET. */
const MIN_TTL_MS = 50;
/**
 * Lookups per MGET. MGETs in flight are not limited (they pipeline on the one
 * connection): every turn's MGET leaves at the end of that turn, so no lookup
 * waits behind another's timeout and each is bounded by commandTimeoutMs.
 */
const LOOKUP_BATCH = 256;
/** Retries of a failed DEL after a release, so a stale marker does not block the retry. */
const FORGET_RETRIES_MS = [50, 250, 1000];

export class RedisCache implements ReplayCache {
  readonly client: Redis;
  readonly breaker: CircuitBreaker;
  readonly prefix: string;
  private readonly maxTtlMs: number;
  private readonly maxInFlightTtlMs: number;
  private readonly maxBodyBytes: number;
  private readonly now: () => number;
  private readonly logger: Logger | undefined;
  private readonly counts: CacheCounts;
  /** After a failed marker DEL: in-flight markers are misses until then. */
  private markersDistrustedUntil = 0;
  private readonly timers = new Set<NodeJS.Timeout>();
  private errorLogged = false;
  private closed = false;
  private readonly ok: () => void;
  private readonly failed: (err: unknown) => void;
  /** Lookups of one turn of the event loop go to Redis as one MGET. */
  private readonly lookups: Batcher<string, Buffer | null>;

  constructor(opts: RedisCacheOptions, deps: RedisCacheDeps) {
    const o = cacheSettings(opts);
    if (/[{}]/.test(o.prefix)) throw new Error(`cache prefix ${JSON.stringify(o.prefix)} must not contain "{" or "}"`);
    for (const [name, v] of [['commandTimeoutMs', o.commandTimeoutMs], ['maxTtlMs', o.maxTtlMs], ['maxInFlightTtlMs', o.maxInFlightTtlMs]] as const) {
      if (!(v > 0)) throw new RangeError(`cache ${name} must be > 0`);
    }
    this.prefix = o.prefix;
    this.maxTtlMs = o.maxTtlMs;
    this.maxInFlightTtlMs = o.maxInFlightTtlMs;
    this.maxBodyBytes = o.maxBodyBytes;
    this.now = deps.now ?? Date.now;
    this.logger = deps.logger;
    const { metrics } = deps;
    this.counts = cacheCounts(metrics);
    metrics.cacheBreakerOpen.set(0);
    const where = maskUrl(opts.url);
    this.breaker = new CircuitBreaker({
      threshold: o.breakerThreshold,
      coolDownMs: o.breakerCoolDownMs,
      onChange: (open) => {
        metrics.cacheBreakerOpen.set(open ? 1 : 0);
        if (open) this.logger?.warn({ redis: where }, 'redis cache breaker open: serving from PostgreSQL only until Redis answers again');
        else {
          this.errorLogged = false; // the next failure episode is logged again
          this.logger?.info({ redis: where }, 'redis cache breaker closed: cache in use again');
        }
      },
    });
    this.ok = () => this.breaker.success();
    this.failed = (err) => {
      this.counts.error.inc();
      this.breaker.failure();
      if (!this.errorLogged && !this.closed) {
        this.errorLogged = true;
        this.logger?.warn({ redis: where, err: (err as Error)?.message }, 'redis cache command failed (further failures are counted, not logged, until it is back)');
      }
    };
    this.client = createRedisClient(opts.url, o);
    this.lookups = new Batcher({
      run: (keys) => this.client.mgetBuffer(keys as string[]),
      maxBatch: LOOKUP_BATCH,
      maxInFlight: Number.POSITIVE_INFINITY,
    });
    // Without a listener ioredis' 'error' events would crash the process.
    this.client.on('error', (err: Error) => {
      if (!this.errorLogged && !this.closed) {
        this.errorLogged = true;
        this.logger?.warn({ redis: where, err: err.message }, 'redis cache unreachable (retrying in the background)');
      }
    });
    this.client.on('ready', () => {
      if (this.errorLogged) this.logger?.info({ redis: where }, 'redis cache reachable again');
      this.errorLogged = false;
      this.breaker.probeNow();
    });
  }

  /**
   * True once connected; false at the first connection error or after
   * timeoutMs (either way the client keeps reconnecting in the background).
   */
  ready(timeoutMs: number): Promise<boolean> {
    if (this.client.status === 'ready') return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (v: boolean): void => {
        clearTimeout(t);
        this.client.off('ready', onReady).off('error', onError);
        resolve(v);
      };
      const onReady = (): void => done(true);
      const onError = (): void => done(false);
      const t = setTimeout(() => done(false), timeoutMs);
      this.client.on('ready', onReady).on('error', onError);
    });
  }

  key(tenantId: string, key: string): string {
    return cacheKey(this.prefix, tenantId, key);
  }

  async lookup(tenantId: string, key: string): Promise<CacheHit | null> {
    if (!this.breaker.allow()) {
      this.counts.skipped.inc();
      return null;
    }
    let value: Buffer | null;
    try {
      value = await this.lookups.submit(cacheKey(this.prefix, tenantId, key));
    } catch (err) {
      this.failed(err);
      return null;
    }
    this.breaker.success();
    if (value === null) {
      this.counts.miss.inc();
      return null;
    }
    const now = this.now();
    const hit = decode(value, now);
    if (hit === null || (hit.kind === 'in_flight' && now < this.markersDistrustedUntil)) {
      this.counts.miss.inc();
      return null;
    }
    this.counts.hit.inc();
    return hit;
  }

  rememberComplete(tenantId: string, key: string, fingerprint: Buffer, response: StoredResponse, ttlMs: number): void {
    const k = cacheKey(this.prefix, tenantId, key);
    const ttl = this.recordTtl(ttlMs);
    const value = this.encodeRecord(fingerprint, response, ttl);
    // Not cached (too big, too short-lived, breaker open): at least the
    // in-flight marker must go, or it would answer 409 for a completed key.
    if (value === null || !this.breaker.allow()) {
      this.del(k, 0);
      return;
    }
    // A plain SET: a completed record always replaces an in-flight marker.
    this.client.set(k, value, 'PX', ttl).then(this.ok, (err: unknown) => {
      this.failed(err);
      this.del(k, 0);
    });
  }

  refill(tenantId: string, key: string, fingerprint: Buffer, response: StoredResponse, ttlMs: number): void {
    const ttl = this.recordTtl(ttlMs);
    const value = this.encodeRecord(fingerprint, response, ttl);
    // A record the cache cannot hold stays a PostgreSQL replay: no command.
    if (value === null) return;
    if (!this.breaker.allow()) {
      this.counts.skipped.inc();
      return;
    }
    // A plain SET, as after a commit: the row is complete, and a marker a
    // SET could replace would be stale.
    this.send(this.client.set(cacheKey(this.prefix, tenantId, key), value, 'PX', ttl));
  }

  /** A completed record's TTL: the row's remaining retention less a margin, capped. */
  private recordTtl(ttlMs: number): number {
    return Math.floor(Math.min(ttlMs - TTL_SAFETY_MS, this.maxTtlMs));
  }

  /** The cached value, or null when the record is not cached (too short-lived, too big, a header too long). */
  private encodeRecord(fingerprint: Buffer, response: StoredResponse, ttl: number): Buffer | null {
    if (!(ttl >= MIN_TTL_MS) || response.body.length > this.maxBodyBytes) return null;
    try {
      return encodeComplete(fingerprint, response, this.now() + ttl);
    } catch {
      return null; // a header too long for the format: served from PostgreSQL
    }
  }

  rememberInFlight(tenantId: string, key: string, fingerprint: Buffer, ttlMs: number, leaseMs?: number): void {
    const lease = leaseMs ?? ttlMs;
    const ttl = Math.floor(Math.min(ttlMs, lease, this.maxInFlightTtlMs));
    if (!(ttl >= 1)) return;
    if (!this.breaker.allow()) {
      this.counts.skipped.inc();
      return;
    }
    const now = this.now();
    // NX: a marker never replaces a completed record (or a marker already there).
    this.send(this.client.set(cacheKey(this.prefix, tenantId, key), encodeInFlight(fingerprint, now + ttl, now + lease), 'PX', ttl, 'NX'));
  }

  forget(tenantId: string, key: string): void {
    this.del(cacheKey(this.prefix, tenantId, key), 0);
  }

  /**
   * For operators (keys purge): deletes the cached entry and waits for the
   * answer (call ready() first: nothing is queued while connecting). True when Redis confirmed the deletion, false if it could not
   * be reached (the entry then lives until its TTL, at most maxTtlMs).
   */
  async purge(tenantId: string, key: string): Promise<boolean> {
    try {
      await this.client.del(cacheKey(this.prefix, tenantId, key));
      return true;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    try {
      await Promise.race([this.client.quit(), new Promise((r) => setTimeout(r, 500).unref())]);
    } catch {
      /* already gone */
    }
    this.client.disconnect();
  }

  private send(p: Promise<unknown>): void {
    p.then(this.ok, this.failed);
  }

  /**
   * DEL of a marker that must go (after a release, or a completed record
   * that was not cached). A marker left behind would answer a retry with 409
   * until it expires, so a failed DEL is retried a few times, and until the
   * markers it may have missed have expired this instance trusts no
   * in-flight marker (its duplicates go to PostgreSQL). Other instances may
   * see a leftover marker for at most maxInFlightTtlMs.
   */
  private del(k: string, attempt: number): void {
    if (this.closed) return;
    if (!this.breaker.allow()) {
      this.counts.skipped.inc();
      this.distrustMarkers();
      return;
    }
    this.client.del(k).then(this.ok, (err: unknown) => {
      this.failed(err);
      this.distrustMarkers();
      const delay = FORGET_RETRIES_MS[attempt];
      if (delay === undefined || this.closed) return;
      const t = setTimeout(() => {
        this.timers.delete(t);
        this.del(k, attempt + 1);
      }, delay);
      t.unref();
      this.timers.add(t);
    });
  }

  private distrustMarkers(): void {
    this.markersDistrustedUntil = this.now() + this.maxInFlightTtlMs;
  }
}

export function createRedisCache(opts: RedisCacheOptions, deps: RedisCacheDeps): RedisCache {
  return new RedisCache(opts, deps);
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}
