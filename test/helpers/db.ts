import { createHash, randomBytes } from 'node:crypto';
import pg from 'pg';
import { createPgDb } from '../../src/store/db/pg.js';
import { createPgliteDb } from '../../src/store/db/pglite.js';
import type { Db } from '../../src/store/db/port.js';
import { migrate } from '../../src/store/migrate.js';
import { migrations } from '../../src/store/migrations/index.js';
import { citusNodes, createCitusDatabase, dropCitusDatabase } from './citus.js';

// A fresh database per test file, cloned from a migrated template
// (CREATE DATABASE … TEMPLATE), on the machine's real PostgreSQL.

export const ADMIN_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const HOW_TO_START =
  "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start " +
  '(or point TEST_DATABASE_URL at a PostgreSQL you may create databases on)';

function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ADMIN_URL, connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
  } catch (err) {
    throw new Error(`PostgreSQL is not reachable at ${ADMIN_URL} (${(err as Error).message}); ${HOW_TO_START}`);
  }
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

// Named by a hash of every migration's text: two checkouts whose schemas
// differ (branches adding migrations side by side) never share a template.
const TEMPLATE = `idem_test_template_${createHash('sha256').update(JSON.stringify(migrations)).digest('hex').slice(0, 12)}`;

async function ensureTemplate(): Promise<void> {
  await admin(async (c) => {
    // Serialize template creation across parallel test files.
    await c.query('SELECT pg_advisory_lock(7477001)');
    try {
      const { rows } = await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [TEMPLATE]);
      if (rows.length > 0) return;
      const building = `${TEMPLATE}_building_${randomBytes(3).toString('hex')}`;
      await c.query(`CREATE DATABASE ${building}`);
      const db = createPgDb({ connectionString: withDatabase(ADMIN_URL, building), max: 1 });
      try {
        await migrate(db);
      } finally {
        await db.close();
      }
      await c.query(`ALTER DATABASE ${building} RENAME TO ${TEMPLATE}`);
    } finally {
      await c.query('SELECT pg_advisory_unlock(7477001)');
    }
  });
}

export interface TestDatabase {
  readonly url: string;
  readonly name: string;
  drop(): Promise<void>;
}

/** A fresh, migrated database of its own. Fails loudly if PostgreSQL is down. */
export async function createTestDatabase(opts: { migrated?: boolean } = {}): Promise<TestDatabase> {
  const migrated = opts.migrated ?? true;
  if (citusNodes !== null) return createCitusTestDatabase(citusNodes, migrated);
  if (migrated) await ensureTemplate();
  const name = `idem_t_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  await admin(async (c) => {
    // CREATE DATABASE … TEMPLATE fails if another session is connected to the template.
    for (let i = 0; ; i++) {
      try {
        await c.query(migrated ? `CREATE DATABASE ${name} TEMPLATE ${TEMPLATE}` : `CREATE DATABASE ${name}`);
        return;
      } catch (err) {
        if (i >= 20 || !/being accessed by other users/.test((err as Error).message)) throw err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  });
  const url = withDatabase(ADMIN_URL, name);
  return {
    url,
    name,
    drop: () => admin(async (c) => {
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    }),
  };
}

async function createCitusTestDatabase(nodes: readonly number[], migrated: boolean): Promise<TestDatabase> {
  const name = `idem_t_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  await createCitusDatabase(nodes, name);
  const url = withDatabase(ADMIN_URL, name);
  if (migrated) {
    const db = createPgDb({ connectionString: url, max: 1 });
    try {
      const m = await migrate(db);
      if (!m.distributed.includes('idempotency_keys')) throw new Error(`migrate did not distribute idempotency_keys on ${name}`);
    } finally {
      await db.close();
    }
  }
  return { url, name, drop: () => dropCitusDatabase(nodes, name) };
}

/** Runs SQL against a test database (for assertions and time travel). */
export async function sql<R = Record<string, unknown>>(url: string, text: string, values: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  // A database dropped under a still-running sampler must fail the query, not the process.
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query(text, values)).rows as R[];
  } finally {
    await client.end();
  }
}

export type Backend = 'postgres' | 'pglite';

/** A migrated Db on either backend, for tests that must pass on both. */
export async function openBackend(backend: Backend): Promise<{ db: Db; url: string | null; close(): Promise<void> }> {
  if (backend === 'pglite') {
    const db = await createPgliteDb(null);
    await migrate(db);
    return { db, url: null, close: () => db.close() };
  }
  const t = await createTestDatabase();
  const db = createPgDb({ connectionString: t.url, max: 4 });
  return {
    db,
    url: t.url,
    close: async () => {
      await db.close();
      await t.drop();
    },
  };
}
