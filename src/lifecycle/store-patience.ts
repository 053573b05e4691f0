// How long the request path keeps trying a key store that is down, for work
// that must not be lost: a commit (the upstream has already run, so the
// record is worth waiting for) and a key given back (src/lifecycle/give-back.ts).
// Nobody can take the key over while the store is down, and both are fenced
// by the owner token, so retrying is safe for as long as the lease would have
// held the key, and at least 30 s; giving a commit up early loses the record
// and lets a retry run the operation again.

/** The waits between attempts; then every STORE_BACKOFF_MAX_MS. */
const STORE_BACKOFF_MS: readonly number[] = [100, 200, 400, 800];
const STORE_BACKOFF_MAX_MS = 1000;
const STORE_PATIENCE_MIN_MS = 30_000;

/** How long to keep trying for a key of lease `leaseMs`. */
export const storePatienceMs = (leaseMs: number): number => Math.max(leaseMs, STORE_PATIENCE_MIN_MS);

/** The wait before attempt `i + 2` (the first attempt has failed). */
export const storeBackoffMs = (i: number): number => STORE_BACKOFF_MS[i] ?? STORE_BACKOFF_MAX_MS;
