/** Inputs of the exponential backoff. */
export interface BackoffPolicy {
  baseDelayMs: number;
  maxDelayMs: number;
}

/**
 * Upper bound of the wait before retry number `retry` (1 = before the second
 * attempt): `min(maxDelayMs, baseDelayMs * 2^(retry - 1))`.
 */
export function backoffCeiling(retry: number, policy: BackoffPolicy): number {
  const exp = policy.baseDelayMs * 2 ** Math.max(0, retry - 1);
  return Math.min(policy.maxDelayMs, exp);
}

/**
 * "Full jitter": a uniformly random wait in `[0, backoffCeiling)`, so that many
 * clients failing together do not retry together. `random` returns `[0, 1)`.
 */
export function fullJitterDelay(retry: number, policy: BackoffPolicy, random: () => number): number {
  const r = random();
  const unit = r >= 0 && r < 1 ? r : 0;
  return Math.floor(unit * backoffCeiling(retry, policy));
}
