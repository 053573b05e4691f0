import type { Db, Queryable } from './db/port.js';
import { sweepCandidatesStatement, sweepDeleteStatement, sweepLockStatement } from './sql/sweep.js';
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
 * holding the sweeper advisory lock: one instance sweeps at a time. A batch
 * of keys reads up to batchSize expired keys, then deletes them one tenant
 * per statement (one shard on Citus), skipping rows a claim holds. Step
 * markers (a table Citus leaves on the coordinator, docs/scale.md) go after
 * the keys, one statement per batch. Each table stops after maxBatches, at
 * the first short batch, or when a batch deleted nothing (all its rows were
 * held), so one pass never runs unbounded.
 */
export async function sweepOnce(db: Db, batchSize: number, maxBatches = 100): Promise<SweepResult> {
  const keys = await sweepTable(db, sweepKeys, batchSize, maxBatches);
  if (!keys.locked) return { locked: false, deleted: keys.deleted, steps: 0 };
  const steps = await sweepTable(db, sweepSteps, batchSize, maxBatches);
  return { locked: steps.locked, deleted: keys.deleted, steps: steps.deleted };
}

/** One batch: how many expired rows it read, and how many of them it deleted. */
type Batch = (tx: Queryable, batchSize: number) => Promise<{ read: number; gone: number }>;

async function sweepKeys(tx: Queryable, batchSize: number): Promise<{ read: number; gone: number }> {
  const rows = await tx.query<{ tenant_id: string; idem_key: string }>(sweepCandidatesStatement, [batchSize]);
  const tenants = new Map<string, string[]>();
  for (const row of rows) {
    const keys = tenants.get(row.tenant_id);
    if (keys === undefined) tenants.set(row.tenant_id, [row.idem_key]);
    else keys.push(row.idem_key);
  }
  let gone = 0;
  for (const [tenantId, keys] of tenants) gone += (await tx.query(sweepDeleteStatement, [tenantId, keys])).length;
  return { read: rows.length, gone };
}

async function sweepSteps(tx: Queryable, batchSize: number): Promise<{ read: number; gone: number }> {
  const n = (await tx.query(sweepStepsBatchStatement, [batchSize])).length;
  return { read: n, gone: n };
}

async function sweepTable(db: Db, batch: Batch, batchSize: number, maxBatches: number): Promise<{ locked: boolean; deleted: number }> {
  let deleted = 0;
  for (let i = 0; i < maxBatches; i++) {
    const r = await db.transaction(async (tx) => {
      const [lock] = await tx.query<{ locked: boolean }>(sweepLockStatement, [SWEEP_LOCK]);
      if (!lock?.locked) return null;
      return batch(tx, batchSize);
    });
    if (r === null) return { locked: false, deleted };
    deleted += r.gone;
    if (r.read < batchSize || r.gone === 0) break;
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
