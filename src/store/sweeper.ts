import type { Db } from './db/port.js';
import type { Statement } from './db/port.js';
import { sweepBatchStatement, sweepLockStatement } from './sql/sweep.js';
import { sweepStepsBatchStatement } from './sql/sweep-steps.js';

const SWEEP_LOCK = 0x1de0_5eed;

export interface SweepResult {
  readonly locked: boolean;
  /** Expired key records deleted. */
  readonly deleted: number;
  /** Expired step markers (idempotency_steps) deleted. */
  readonly steps: number;
}

/**
 * Deletes expired rows in bounded batches, one transaction per batch, while
 * holding the sweeper advisory lock: one instance sweeps at a time. Stops
 * after maxBatches so one pass never runs unbounded. Key records first, then
 * step markers, each table with its own bound.
 */
export async function sweepOnce(db: Db, batchSize: number, maxBatches = 100): Promise<SweepResult> {
  const keys = await sweepTable(db, sweepBatchStatement, batchSize, maxBatches);
  if (!keys.locked) return { locked: false, deleted: keys.deleted, steps: 0 };
  const steps = await sweepTable(db, sweepStepsBatchStatement, batchSize, maxBatches);
  return { locked: steps.locked, deleted: keys.deleted, steps: steps.deleted };
}

async function sweepTable(db: Db, batch: Statement, batchSize: number, maxBatches: number): Promise<{ locked: boolean; deleted: number }> {
  let deleted = 0;
  for (let i = 0; i < maxBatches; i++) {
    const r = await db.transaction(async (tx) => {
      const [lock] = await tx.query<{ locked: boolean }>(sweepLockStatement, [SWEEP_LOCK]);
      if (!lock?.locked) return null;
      const rows = await tx.query(batch, [batchSize]);
      return rows.length;
    });
    if (r === null) return { locked: false, deleted };
    deleted += r;
    if (r < batchSize) break;
  }
  return { locked: true, deleted };
}

export interface Sweeper {
  stop(): void;
}

export function startSweeper(
  db: Db,
  opts: { intervalMs: number; batchSize: number; onResult?: (r: SweepResult) => void; onError?: (e: unknown) => void },
): Sweeper {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    sweepOnce(db, opts.batchSize)
      .then((r) => opts.onResult?.(r), (e) => opts.onError?.(e))
      .finally(() => { running = false; });
  }, opts.intervalMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
