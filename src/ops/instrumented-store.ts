import type { Metrics } from '../metrics/metrics.js';
import type { Db } from '../store/db/port.js';
import { KeyStore, type KeyStoreOptions } from '../store/key-store.js';

// The key store with the latency of the operations the lifecycle does not
// time itself: release and lease extension (claim and commit are timed in
// src/lifecycle/, next to their retries), and the size of every batched
// statement. Failed extensions are counted here: the heartbeat only logs them.

export class InstrumentedKeyStore extends KeyStore {
  constructor(db: Db, private readonly metrics: Metrics, opts: KeyStoreOptions = {}) {
    const claimRows = metrics.batchSize.labels('claim');
    const commitRows = metrics.batchSize.labels('commit');
    super(db, { ...opts, onBatch: (statement, rows) => (statement === 'claim' ? claimRows : commitRows).observe(rows) });
  }

  override async release(tenantId: string, key: string, ownerToken: string): Promise<void> {
    const t0 = performance.now();
    await super.release(tenantId, key, ownerToken);
    this.metrics.storeDuration.observe({ op: 'release' }, (performance.now() - t0) / 1000);
  }

  override async extend(tenantId: string, key: string, ownerToken: string, leaseMs: number): Promise<boolean> {
    const t0 = performance.now();
    try {
      const held = await super.extend(tenantId, key, ownerToken, leaseMs);
      this.metrics.storeDuration.observe({ op: 'extend' }, (performance.now() - t0) / 1000);
      return held;
    } catch (err) {
      this.metrics.storeErrors.inc({ op: 'extend' });
      throw err;
    }
  }
}
