import type { Db, Queryable, Statement } from './db/port.js';
import { migrations, latestVersion, type Migration } from './migrations/index.js';
import { splitStatements } from './migrations/split.js';

// Any fixed 64-bit number; the same in every instance.
const MIGRATION_LOCK = 0x1de0_7e17; // "idempotent"
const SQL = {
  lock: { name: 'idem_migrate_lock', text: 'SELECT pg_advisory_xact_lock($1::bigint)' },
  table: {
    name: 'idem_migrate_table',
    text: `CREATE TABLE IF NOT EXISTS idempotency_schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
  },
  applied: { name: 'idem_migrate_applied', text: 'SELECT version FROM idempotency_schema_migrations ORDER BY version' },
  record: { name: 'idem_migrate_record', text: 'INSERT INTO idempotency_schema_migrations (version, name) VALUES ($1, $2)' },
  current: {
    name: 'idem_migrate_current',
    text: `SELECT coalesce(max(version), 0)::int AS version FROM idempotency_schema_migrations`,
  },
  exists: { name: 'idem_migrate_exists', text: `SELECT to_regclass('idempotency_schema_migrations') IS NOT NULL AS present` },
} as const;

export interface MigrateResult {
  readonly applied: readonly Migration[];
  readonly version: number;
  /** Tables this run distributed on Citus (empty elsewhere, and once done). */
  readonly distributed: readonly string[];
}

// On Citus (the citus extension is present), the key table is distributed by
// tenant and the migrations table becomes a reference table (a copy on every
// node), in the migration's transaction, under its lock: two instances
// starting at once do it once (docs/scale.md). Unnamed: run once per migrate.
const CITUS = {
  present: { name: '', text: `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') AS present` },
  done: { name: '', text: `SELECT logicalrelid::regclass::text AS name FROM pg_dist_partition` },
  distribute: { name: '', text: `SELECT create_distributed_table('idempotency_keys', 'tenant_id')` },
  reference: { name: '', text: `SELECT create_reference_table('idempotency_schema_migrations')` },
  // A migration that changes the distributed table (ALTER TABLE, migration 8) and then creates or
  // distributes a function in the same transaction: Citus refuses the function command after a parallel
  // operation on a distributed table ("cannot run function command because there was a parallel
  // operation…"). One connection per worker for the whole transaction lets both run.
  sequential: { name: '', text: `SET LOCAL citus.multi_shard_modify_mode TO 'sequential'` },
} as const;

// The claim functions run whole on the worker of the tenant's shard (migrations 4 and 8): the one of
// migration 4 for instances of earlier versions during a rolling upgrade, its successor for this one.
const CLAIM_FUNCTIONS = ['idempotency_claim', 'idempotency_claim_v2'] as const;
const claimDistributed = (fn: string): Statement => ({
  name: '',
  text: `SELECT EXISTS (SELECT 1 FROM pg_dist_object
                       WHERE objid = '${fn}'::regproc AND distribution_argument_index IS NOT NULL) AS done`,
});
const distributeClaim = (fn: string): Statement => ({
  name: '',
  text: `SELECT create_distributed_function('${fn}'::regproc, 'p_tenant', colocate_with := 'idempotency_keys')`,
});

/** True when the citus extension is installed: the key table is (or is about to be) distributed. */
export async function onCitus(db: Queryable): Promise<boolean> {
  const [citus] = await db.query<{ present: boolean }>(CITUS.present, []);
  return citus?.present === true;
}

/** On Citus: distributes what is not yet (the key table, the migrations table, the claim functions). */
async function distributeOnCitus(tx: Queryable): Promise<string[]> {
  const done = new Set((await tx.query<{ name: string }>(CITUS.done, [])).map((r) => r.name));
  const distributed: string[] = [];
  if (!done.has('idempotency_schema_migrations')) {
    await tx.query(CITUS.reference, []);
    distributed.push('idempotency_schema_migrations');
  }
  if (!done.has('idempotency_keys')) {
    await tx.query(CITUS.distribute, []);
    distributed.push('idempotency_keys');
  }
  for (const fn of CLAIM_FUNCTIONS) {
    const [claim] = await tx.query<{ done: boolean }>(claimDistributed(fn), []);
    if (claim?.done !== true) {
      await tx.query(distributeClaim(fn), []);
      distributed.push(`${fn}()`);
    }
  }
  return distributed;
}

/** Applies pending migrations in one transaction under an advisory lock (then distributes on Citus). */
export async function migrate(db: Db): Promise<MigrateResult> {
  return db.transaction(async (tx) => {
    await tx.query(SQL.lock, [MIGRATION_LOCK]);
    const citus = await onCitus(tx);
    if (citus) await tx.query(CITUS.sequential, []);
    await tx.query(SQL.table, []);
    const done = new Set((await tx.query<{ version: number }>(SQL.applied, [])).map((r) => r.version));
    const applied: Migration[] = [];
    for (const m of migrations) {
      if (done.has(m.version)) continue;
      // Unnamed: DDL is run once, never prepared.
      await runScript(tx, m.sql);
      await tx.query(SQL.record, [m.version, m.name]);
      applied.push(m);
    }
    return { applied, version: latestVersion, distributed: citus ? await distributeOnCitus(tx) : [] };
  });
}

async function runScript(tx: Queryable, sql: string): Promise<void> {
  for (const statement of splitStatements(sql)) {
    await tx.query({ name: '', text: statement }, []);
  }
}

/** The schema version in the database, 0 when never migrated. */
export async function schemaVersion(db: Queryable): Promise<number> {
  const [row] = await db.query<{ present: boolean }>(SQL.exists, []);
  if (!row?.present) return 0;
  const [cur] = await db.query<{ version: number }>(SQL.current, []);
  return cur?.version ?? 0;
}

export { latestVersion };
