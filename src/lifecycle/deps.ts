import type { Logger } from '../log/logger.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Upstream } from '../proxy/upstream.js';
import type { ReplayCache } from '../store/cache.js';
import type { RequestTracing } from '../tracing/spans.js';
import type { KeyStore } from '../store/key-store.js';
import type { StoreHealth } from './estimate.js';
import type { MemoryBudget } from './budget.js';
import type { GiveBacks } from './give-back.js';
import type { Plans } from './plan.js';
import type { Waiters } from './waiters.js';

/** Everything the lifecycle needs, wired once in src/app.ts. */
export interface LifecycleDeps {
  /** The compiled routes; swapped whole on reload (in-flight requests keep the plan they started with). */
  readonly plans: Plans;
  readonly store: KeyStore;
  readonly cache: ReplayCache | null;
  readonly upstream: Upstream;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly waiters: Waiters;
  /** Whether the key store answers, and since when not: the Retry-After of a 503. */
  readonly storeHealth: StoreHealth;
  /** limits.maxBufferedBytes, shared by every request. */
  readonly budget: MemoryBudget;
  /** Request spans (docs/operations.md, Tracing); null when tracing is off. */
  readonly tracing: RequestTracing | null;
  /** Keys given back once the store answers again (src/lifecycle/give-back.ts). */
  readonly giveBacks: GiveBacks;
  /** How long a client may read nothing of a response it holds the upstream back for (src/proxy/slow-client.ts). */
  readonly sendTimeoutMs: number;
}
