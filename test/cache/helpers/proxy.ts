import type { Metrics } from '../../../src/metrics/metrics.js';
import { send, type Reply } from '../../helpers/http.js';

// Readers for the cache metrics, and the cache tests' shared settings. The
// proxy itself starts with startTestProxy (test/helpers/proxy.ts), its cache
// tuning in `start.redisCache`.

/**
 * For files that do not test command timeouts (outage.test.ts does): a roomy
 * timeout keeps a busy CI machine's event-loop stalls from opening the breaker.
 */
export const LOADED_MACHINE_TIMEOUT_MS = 1000;

export type CacheCounts = Record<'hit' | 'miss' | 'error' | 'skipped', number>;

export async function cacheCounts(m: Metrics): Promise<CacheCounts> {
  const out: CacheCounts = { hit: 0, miss: 0, error: 0, skipped: 0 };
  for (const v of (await m.cache.get()).values) out[v.labels.result as keyof CacheCounts] = v.value;
  return out;
}

export async function breakerOpen(m: Metrics): Promise<number> {
  return (await m.cacheBreakerOpen.get()).values[0]?.value ?? 0;
}

/** How many claim statements the proxy ran (each claim observes the store histogram). */
export async function claimCount(m: Metrics): Promise<number> {
  const v = (await m.storeDuration.get()).values.find((x) => x.labels.op === 'claim' && (x as { metricName?: string }).metricName?.endsWith('_count'));
  return v?.value ?? 0;
}

/** A request with its wall time. */
export async function timed(url: string, opts: Parameters<typeof send>[1]): Promise<Reply & { ms: number }> {
  const t0 = performance.now();
  const r = await send(url, opts);
  return Object.assign(r, { ms: performance.now() - t0 });
}

/** Headers a replay must carry over, without the per-response ones. */
export function comparableHeaders(h: Reply['headers']): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(h)) {
    if (k === 'date' || k === 'x-request-id' || k === 'connection' || k === 'keep-alive') continue;
    out[k] = v;
  }
  return out;
}
