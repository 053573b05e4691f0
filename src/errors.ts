// The faults of the request path, one class each with a stable `code`
// (undici's UND_ERR_* habit). Each carries its **source** — who failed — and
// whether the same request may be retried unchanged (pingora's habit): for
// us that is the line between "release the key" and "store the outcome".
// Expected outcomes (replay, conflict, mismatch) are values, never errors;
// the one mapping from these errors to problem types is `problemFor` in
// src/http/problems.ts. Configuration errors (src/config/errors.ts) and the
// client library's errors (src/client/errors.ts) belong to other front doors.

/** Who failed: the client's request, the upstream, the key store, or the proxy itself (a bug). */
export type ErrorSource = 'client' | 'upstream' | 'store' | 'internal';

/** When an upstream exchange failed, which decides the key's fate (docs/lifecycle.md, forward). */
export type FailureKind = 'not_sent' | 'timeout' | 'reset';

/** The key store cannot be reached, dropped the connection, or did not answer in time. */
export class StoreUnavailableError extends Error {
  readonly code = 'IDEMP_STORE_UNAVAILABLE';
  readonly source: ErrorSource = 'store';
  readonly retryable = true;
  /**
   * The statement had been sent when the store failed (no answer in time, the connection lost meanwhile): it
   * may have taken effect on the server with its reply lost. False: it never left (no connection, refused).
   */
  maybeApplied = false;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreUnavailableError';
  }
}

/** A key was neither claimed nor readable after the claim's bounded attempts (rows vanishing under it). */
export class ClaimRaceError extends Error {
  readonly code = 'IDEMP_CLAIM_RACE';
  readonly source: ErrorSource = 'store';
  readonly retryable = true;
  constructor(attempts: number) {
    super(`key neither claimed nor readable after ${attempts} attempts`);
    this.name = 'ClaimRaceError';
  }
}

/**
 * A claim that failed, for a reason other than the store being out of reach (an SQL error in a takeover: a
 * deadlock PostgreSQL broke, say), after a statement of the same claim took keys (src/store/tenant-claim.ts,
 * claimFailed). Its requests run nothing and are answered as the failure (`cause`) would be, 500; each gives its
 * claim back (src/lifecycle/give-back.ts), as after a store failure marked maybeApplied.
 */
export class ClaimFailedError extends Error {
  readonly code = 'IDEMP_CLAIM_FAILED';
  readonly source: ErrorSource = 'store';
  readonly retryable = false;
  constructor(cause: unknown) {
    super(`the claim failed after it took keys: ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = 'ClaimFailedError';
  }
}

/**
 * PostgreSQL rolled the statement back to break a deadlock or a serialization conflict (SQLSTATE 40P01, 40001):
 * the store is up, and the same statement may simply be sent again.
 */
export function isRolledBack(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === '40P01' || code === '40001';
}

/** A claim's failure after which its key may be held for its request, which runs nothing: to be given back. */
export function claimMayHaveTaken(err: unknown): boolean {
  return err instanceof ClaimFailedError || (err instanceof StoreUnavailableError && err.maybeApplied);
}

/** The upstream exchange failed; `kind` says when. */
export class UpstreamError extends Error {
  readonly source: ErrorSource = 'upstream';
  constructor(readonly kind: FailureKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'UpstreamError';
  }
  get code(): string {
    return this.kind === 'not_sent' ? 'IDEMP_UPSTREAM_UNREACHABLE' : this.kind === 'timeout' ? 'IDEMP_UPSTREAM_TIMEOUT' : 'IDEMP_UPSTREAM_RESET';
  }
  /** Only a request that never reached the upstream may be sent again as if new; otherwise the stored answer is replayed. */
  get retryable(): boolean {
    return this.kind === 'not_sent';
  }
}

/** upstream.timeout ran out for the whole exchange (record mode's own timer). */
export class TimeoutSignal extends Error {
  readonly code = 'IDEMP_UPSTREAM_TIMEOUT';
  constructor(ms: number) {
    super(`the upstream did not answer within ${ms} ms`);
    this.name = 'TimeoutSignal';
  }
}

/** The source of any error: typed errors say it; anything else is a bug of the proxy's. */
export function sourceOf(err: unknown): ErrorSource {
  const s = (err as { source?: unknown } | null)?.source;
  return s === 'client' || s === 'upstream' || s === 'store' || s === 'internal' ? s : 'internal';
}
