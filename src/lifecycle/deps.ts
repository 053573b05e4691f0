import type { Config } from '../config/types.js';
import type { Logger } from '../log/logger.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Router } from '../policy/router.js';
import type { Upstream } from '../proxy/upstream.js';
import type { ReplayCache } from '../store/cache.js';
import type { KeyStore } from '../store/key-store.js';
import type { Waiters } from './waiters.js';

/** Everything the lifecycle needs, wired once in src/app.ts. */
export interface LifecycleDeps {
  readonly config: Config;
  readonly router: Router;
  readonly store: KeyStore;
  readonly cache: ReplayCache | null;
  readonly upstream: Upstream;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly waiters: Waiters;
}
