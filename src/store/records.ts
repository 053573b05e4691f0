// What the store hands to the lifecycle: tagged values, never raw rows.

export type OnExpiredLeasePolicy = 'reexecute' | 'fail' | 'probe';

export interface ClaimRequest {
  readonly tenantId: string;
  readonly key: string;
  readonly fingerprint: Buffer; // 32 bytes
  readonly ownerToken: string; // uuid
  readonly leaseMs: number;
  readonly ttlMs: number;
  readonly onExpiredLease: OnExpiredLeasePolicy;
  readonly route: string;
  readonly method: string;
  readonly path: string;
}

/** A stored response, as replayed. Headers keep order and repeated names. */
export interface StoredResponse {
  readonly status: number;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly body: Buffer;
  readonly bodyRetained: boolean;
  readonly bodySize: number;
  /**
   * The traceparent of the traced execution that recorded it, for its replays' links (docs/operations.md,
   * Tracing); null or absent when none. Stored in its own column (migration 8), never replayed. A record
   * stored before that column keeps it as a reserved last header instead (src/proxy/headers.ts).
   */
  readonly trace?: string | null;
}

export type ClaimOutcome =
  | { readonly kind: 'claimed'; readonly attempt: number }
  | { readonly kind: 'mismatch' }
  | { readonly kind: 'in_flight'; readonly retryAfterS: number }
  | { readonly kind: 'outcome_unknown' }
  /** ttlLeftMs: the row's remaining retention, by the database clock (for the cache). */
  | { readonly kind: 'complete'; readonly response: StoredResponse; readonly ttlLeftMs?: number };

export interface CommitRequest {
  readonly tenantId: string;
  readonly key: string;
  readonly ownerToken: string;
  readonly response: StoredResponse;
}

/**
 * committed: false means the lease was taken over (fenced out). kept: the row
 * was already complete under this claim (settled by the upstream in its own
 * transaction, or an earlier try of this commit): the stored record is the
 * one that was there, not necessarily this response.
 */
export type CommitOutcome =
  | { readonly committed: true; readonly ttlLeftMs: number; readonly kept?: boolean }
  | { readonly committed: false };

export interface KeyRecord {
  readonly tenantId: string;
  readonly key: string;
  readonly state: 'in_flight' | 'complete' | 'outcome_unknown';
  readonly attempt: number;
  readonly onExpiredLease: OnExpiredLeasePolicy;
  readonly fingerprint: Buffer;
  readonly lockedUntil: Date | null;
  readonly expiresAt: Date;
  readonly createdAt: Date;
  readonly completedAt: Date | null;
  readonly statusCode: number | null;
  readonly responseHeaders: ReadonlyArray<readonly [string, string]> | null;
  readonly responseBody: Buffer | null; // only when asked for
  /** StoredResponse.trace: null when none was kept, or when a record stored before migration 8 keeps it in its headers. */
  readonly traceContext: string | null;
  readonly bodyRetained: boolean | null;
  readonly bodySize: number | null;
  readonly route: string | null;
  readonly method: string | null;
  readonly path: string | null;
  readonly expired: boolean;
  readonly leaseExpired: boolean;
  readonly retryAfterS: number;
}
