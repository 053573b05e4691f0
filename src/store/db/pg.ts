import pg from 'pg';
import { type Db, type Queryable, type Statement, StoreUnavailableError } from './port.js';

export interface PgDbOptions {
  readonly connectionString: string;
  readonly max: number;
  readonly connectionTimeoutMs?: number;
  readonly statementTimeoutMs?: number;
  readonly onError?: (err: Error) => void;
}

// Errors that mean "the database could not be reached or dropped us", as
// opposed to a bug in a statement. They become StoreUnavailableError (→ 503).
const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH',
  '57P01', '57P02', '57P03', '53300', '08000', '08003', '08006', '08001', '08004',
  '3D000', // the database does not exist (dropped, or a wrong URL after a move)
  '25006', // read-only transaction: connected to a standby after a failover
  '57014', // statement timeout: the store is too slow to answer
  '55000', // "database is not accepting connections" (ALLOW_CONNECTIONS false, maintenance)
]);
// Whole SQLSTATE classes: connection exceptions, insufficient resources,
// operator intervention (shutdown, database dropped), rejected credentials.
const UNAVAILABLE_CLASSES = /^(08|53|57P|28)/;

export function isUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: string }).code;
  if (code !== undefined && (UNAVAILABLE_CODES.has(code) || (code.length === 5 && UNAVAILABLE_CLASSES.test(code)))) return true;
  return /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|connection ended|Connection closed/i.test(err.message);
}

function wrap(err: unknown): unknown {
  if (isUnavailable(err)) return new StoreUnavailableError(`PostgreSQL unavailable: ${(err as Error).message}`, { cause: err });
  return err;
}

class PgQueryable implements Queryable {
  constructor(private readonly client: pg.Pool | pg.PoolClient) {}
  async query<R>(stmt: Statement, values: readonly unknown[]): Promise<R[]> {
    try {
      const res = await this.client.query({ name: stmt.name, text: stmt.text, values: values as unknown[] });
      return res.rows as R[];
    } catch (err) {
      throw wrap(err);
    }
  }
}

const NOT_ON_CITUS_GENERIC_PLANS = `SELECT set_config('plan_cache_mode', 'force_generic_plan', false)
  WHERE NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`;

export function createPgDb(opts: PgDbOptions): Db {
  const pool = new pg.Pool({
    connectionString: opts.connectionString,
    max: opts.max,
    connectionTimeoutMillis: opts.connectionTimeoutMs ?? 5000,
    statement_timeout: opts.statementTimeoutMs ?? 30_000,
    keepAlive: true,
    application_name: 'idempotency-proxy',
    // Every statement of the proxy finds its rows by key (the primary key)
    // or by expiry (its index); a sequential scan of idempotency_keys is never
    // the right plan for them, whatever the statistics say. Left to itself,
    // PostgreSQL caches a generic plan after five executions, and a plan made
    // while the table was empty or small (a new deployment, a fresh
    // database) joined the batch input by a sequential scan of the whole
    // table: claims and commits slowed down as the table grew (bench/soak.ts:
    // claim time rising 10 → 26 ms within a minute, throughput halving).
    // With sequential scans ruled out on these sessions, the generic plan is
    // the index plan, and it is made once per connection instead of once per
    // execution (planning the claim for each batch cost PostgreSQL about as
    // much CPU as running it). Set before the pool hands the connection out;
    // a server without plan_cache_mode (< 12) keeps its default there.
    onConnect: async (client: pg.ClientBase) => {
      await client.query('SET enable_seqscan = off').catch(() => {});
      // Not on Citus: it cannot route a generic plan of a statement that is
      // not a fast-path query (docs/scale.md); there plans stay custom.
      await client.query(NOT_ON_CITUS_GENERIC_PLANS).catch(() => {});
    },
  });
  // An idle client losing its connection must not crash the process.
  pool.on('error', (err) => opts.onError?.(err));
  const root = new PgQueryable(pool);
  const safeUrl = redactUrl(opts.connectionString);
  return {
    singleInstance: false,
    description: `PostgreSQL ${safeUrl}`,
    query: (stmt, values) => root.query(stmt, values),
    async transaction(fn) {
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (err) {
        throw wrap(err);
      }
      let broken = false;
      try {
        await client.query('BEGIN');
        const result = await fn(new PgQueryable(client));
        await client.query('COMMIT');
        return result;
      } catch (err) {
        try {
          await client.query('ROLLBACK');
        } catch {
          broken = true;
        }
        throw wrap(err);
      } finally {
        client.release(broken);
      }
    },
    close: () => pool.end(),
  };
}

export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '<unparseable url>';
  }
}
