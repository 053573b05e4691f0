import type { Db, Queryable } from './db/port.js';
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
}

/** Applies pending migrations in one transaction under an advisory lock. */
export async function migrate(db: Db): Promise<MigrateResult> {
  return db.transaction(async (tx) => {
    await tx.query(SQL.lock, [MIGRATION_LOCK]);
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
    return { applied, version: latestVersion };
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
