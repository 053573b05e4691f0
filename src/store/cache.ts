import type { StoredResponse } from './records.js';

// The lookaside cache port (Redis in src/store/redis-cache.ts). It may make
// the proxy faster, never change a decision: a hit answers a replay or a 409
// only when the fingerprint matches, and a miss or an error falls through to
// the PostgreSQL claim. It never says a key is new.

export type CacheHit =
  | { readonly kind: 'complete'; readonly fingerprint: Buffer; readonly response: StoredResponse }
  | { readonly kind: 'in_flight'; readonly fingerprint: Buffer; readonly retryAfterS: number };

export interface ReplayCache {
  lookup(tenantId: string, key: string): Promise<CacheHit | null>;
  /** After a commit; ttlMs never longer than the row's remaining retention. Fire and forget. */
  rememberComplete(tenantId: string, key: string, fingerprint: Buffer, response: StoredResponse, ttlMs: number): void;
  /**
   * After a replay served from PostgreSQL (a miss: Redis flushed, restarted,
   * or down when the key completed): puts the record back, so the next
   * duplicate is a hit. ttlMs as for rememberComplete. Only a SET, and only
   * of a record the cache can hold; fire and forget.
   */
  refill(tenantId: string, key: string, fingerprint: Buffer, response: StoredResponse, ttlMs: number): void;
  /**
   * After a claim: a short-lived marker so a retry storm gets its 409 without
   * PostgreSQL. ttlMs is capped by leaseMs (the claim's lease, also used for
   * Retry-After); without leaseMs, ttlMs stands for both.
   */
  rememberInFlight(tenantId: string, key: string, fingerprint: Buffer, ttlMs: number, leaseMs?: number): void;
  /** After a release or purge. */
  forget(tenantId: string, key: string): void;
  close(): Promise<void>;
}
