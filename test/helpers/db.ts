import { createHash, randomBytes } from 'node:crypto';
import pg from 'pg';
import { createPgDb } from '../../src/store/db/pg.js';
import { createPgliteDb } from '../../src/store/db/pglite.js';
import type { Db } from '../../src/store/db/port.js';
import { migrate } from '../../src/store/migrate.js';
import { migrations } from '../../src/store/migrations/index.js';
import { sleep } from './wait.js';
import { startPgBouncer } from './pgbouncer.js';
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

/** Fails, saying how to start it, when the machine's PostgreSQL (ADMIN_URL) cannot be reached. */
export async function requirePostgres(): Promise<void> {
  await admin(async () => undefined);
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

/**
 * Runs `fn` while `db` is blocked: no new connections, the open ones killed,
 * so anything that needs PostgreSQL fails meanwhile (a replay from Redis must
 * not). Connections are allowed again afterwards, however `fn` ended.
 */
export async function whileBlocked<T>(db: TestDatabase, fn: () => Promise<T>): Promise<T> {
  await sql(ADMIN_URL, `ALTER DATABASE ${db.name} ALLOW_CONNECTIONS false`);
  try {
    await sql(ADMIN_URL, 'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [db.name]);
    return await fn();
  } finally {
    await sql(ADMIN_URL, `ALTER DATABASE ${db.name} ALLOW_CONNECTIONS true`);
  }
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
        await sleep(100);
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
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  // A database dropped under a still-running sampler must fail the query, not the process.
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query(text, values)).rows as R[];
  } finally {
    await client.end();
  }
}

/**
 * While `fn` runs, PostgreSQL itself refuses the updates (`on`: or the deletes) of idempotency_keys rows that `when`
 * selects (a trigger's WHEN condition on OLD, and NEW for updates), raising SQLSTATE `code` — in this test's
 * database only. `once`: only the first such update is refused, and `fn` gets how many were tried so far (a
 * sequence counts them: nextval is not rolled back with the statement; on Citus the trigger runs on the
 * workers, which do not have the sequence, so `once` is for plain PostgreSQL). Without `once`, every one is
 * refused and the count stays 0.
 */
export async function whileRefusing<T>(
  url: string, opts: { code: string; when: string; once?: boolean; on?: 'UPDATE' | 'DELETE' },
  fn: (tries: () => Promise<number>) => Promise<T>,
): Promise<T> {
  // On Citus (npm run test:citus) a trigger on a distributed table must be allowed first, in the same session.
  const trigger = async (text: string): Promise<void> => {
    if (process.env.TEST_CITUS_NODES === undefined) return void await sql(url, text);
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
    await client.connect();
    try {
      await client.query('SET citus.enable_unsafe_triggers = on');
      await client.query(text);
    } finally {
      await client.end();
    }
  };
  try {
    await sql(url, 'CREATE SEQUENCE idem_test_tries');
    await sql(url, `CREATE FUNCTION idem_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        ${opts.once === true ? "IF nextval('idem_test_tries') = 1 THEN" : ''}
          RAISE EXCEPTION 'refused by the test (SQLSTATE ${opts.code})' USING ERRCODE = '${opts.code}';
        ${opts.once === true ? 'END IF;' : ''}
        RETURN coalesce(NEW, OLD);
      END $$`);
    await trigger(`CREATE TRIGGER idem_test_refuse BEFORE ${opts.on ?? 'UPDATE'} ON idempotency_keys FOR EACH ROW WHEN (${opts.when})
      EXECUTE FUNCTION idem_test_refuse()`);
    const tries = async (): Promise<number> => {
      const [r] = await sql<{ n: string; called: boolean }>(url, 'SELECT last_value AS n, is_called AS called FROM idem_test_tries');
      return r!.called ? Number(r!.n) : 0;
    };
    return await fn(tries);
  } finally {
    await trigger('DROP TRIGGER IF EXISTS idem_test_refuse ON idempotency_keys');
    await sql(url, 'DROP FUNCTION IF EXISTS idem_test_refuse()');
    await sql(url, 'DROP SEQUENCE IF EXISTS idem_test_tries');
  }
}

/** Rows in the key table. */
export async function rowCount(url: string): Promise<number> {
  const [r] = await sql<{ n: number }>(url, 'SELECT count(*)::int AS n FROM idempotency_keys');
  return r!.n;
}

/** One key's row (any tenant), or undefined. */
export async function row(url: string, key: string): Promise<{ state: string; attempt: number; status_code: number | null } | undefined> {
  const rows = await sql<{ state: string; attempt: number; status_code: number | null }>(url,
    'SELECT state, attempt, status_code FROM idempotency_keys WHERE idem_key = $1', [key]);
  return rows[0];
}

/** Backends of the proxy's pools (application_name idempotency-proxy) in this database waiting on a lock right now. */
export async function lockWaiters(url: string): Promise<number> {
  if (citusNodes !== null) return citusLockWaiters(url, citusNodes);
  const [r] = await sql<{ n: number }>(url, `SELECT count(*)::int AS n FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name = 'idempotency-proxy'`);
  return r!.n;
}

/**
 * On Citus the row locks are taken on the workers, by the coordinator's
 * connections to them (not named idempotency-proxy): the sessions of this
 * database waiting on a lock, summed over every node.
 */
async function citusLockWaiters(url: string, nodes: readonly number[]): Promise<number> {
  let n = 0;
  for (const port of nodes) {
    const u = new URL(url);
    u.port = String(port);
    const [r] = await sql<{ n: number }>(u.toString(), `SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock'`);
    n += r!.n;
  }
  return n;
}

/**
 * `pgbouncer`: the machine's PostgreSQL through a PgBouncer of the test's own
 * in transaction mode, with unnamed statements (store.preparedStatements: false).
 */
export type Backend = 'postgres' | 'pglite' | 'pgbouncer';

/** A migrated Db on any backend, for tests that must pass on each. */
export async function openBackend(backend: Backend): Promise<{ db: Db; url: string | null; close(): Promise<void> }> {
  if (backend === 'pglite') {
    const db = await createPgliteDb(null);
    await migrate(db);
    return { db, url: null, close: () => db.close() };
  }
  const t = await createTestDatabase();
  if (backend === 'pgbouncer') return throughPgBouncer(t);
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

async function throughPgBouncer(t: TestDatabase): Promise<{ db: Db; url: string; close(): Promise<void> }> {
  let bouncer;
  try {
    bouncer = await startPgBouncer(ADMIN_URL);
  } catch (err) {
    await t.drop();
    throw err;
  }
  const db = createPgDb({ connectionString: bouncer.url(t.name), max: 4, preparedStatements: false });
  return {
    db,
    url: t.url,
    close: async () => {
      await db.close();
      await bouncer.stop();
      await t.drop();
    },
  };
}
