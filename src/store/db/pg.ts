import pg from 'pg';
import { acquire, bounded, release } from './pg-bounded.js';
import { StoreTimeoutError, isUnavailable, wrap } from './pg-errors.js';
import { StoreUnavailableError, type Db, type Queryable, type Statement } from './port.js';
import { maskUrl } from '../../config/mask.js';

export { isUnavailable } from './pg-errors.js';

export interface PgDbOptions {
  readonly connectionString: string;
  readonly max: number;
  /**
   * store.idleTimeout: how long a connection may sit idle in the pool before it is closed (unset: pg's 10 s). The
   * pool hands out the connection released last, so under a steady load the few connections it needs only at its
   * peaks sit idle; with pg's 10 s they were closed and dialled again every few seconds (a new server process,
   * authentication, the session settings, each statement prepared again).
   */
  readonly idleTimeoutMs?: number;
  /** store.timeout: the bound on every round trip, the wait for a pool connection included. */
  readonly timeoutMs?: number;
  /** The sessions' server-side statement_timeout (not sent with preparedStatements: false). */
  readonly statementTimeoutMs?: number;
  /**
   * store.preparedStatements (default true). False sends every statement
   * unnamed and sets nothing on the session, so that a pooler in transaction
   * mode (PgBouncer) can carry it: docs/configuration.md.
   */
  readonly preparedStatements?: boolean;
  readonly onError?: (err: Error) => void;
}

export const DEFAULT_STORE_TIMEOUT_MS = 5000;
const DEFAULT_STATEMENT_TIMEOUT_MS = 30_000;
/** An idle store connection is probed by TCP keepalive after this long. */
const KEEPALIVE_IDLE_MS = 10_000;

// Every statement of the proxy finds its rows by key (the primary key) or by
// expiry (its index); a sequential scan of idempotency_keys is never the
// right plan for them, whatever the statistics say. Left to itself,
// PostgreSQL caches a generic plan after five executions, and a plan made
// while the table was empty or small (a new deployment, a fresh database)
// joined the batch input by a sequential scan of the whole table: claims and
// commits slowed down as the table grew (bench/soak.ts: claim time rising
// 10 → 26 ms within a minute, throughput halving). With sequential scans
// ruled out on these sessions, the generic plan is the index plan, and it is
// made once per connection instead of once per execution (planning the claim
// for each batch cost PostgreSQL about as much CPU as running it). Set before
// the pool hands the connection out; a server without plan_cache_mode (< 12)
// keeps its default there. Unnamed statements (preparedStatements: false)
// are planned for their own parameters each time and cache no plan, so they
// need neither setting — and through a pooler in transaction mode a session
// setting would not stay with this client anyway (docs/configuration.md).
// Generic plans are not forced on Citus: it cannot route a generic plan of a
// statement that is not a fast-path query (docs/scale.md); there plans stay
// custom. One statement decides and sets it (no extra round trip).
const SESSION_SETTINGS = [
  'SET enable_seqscan = off',
  `SELECT set_config('plan_cache_mode', 'force_generic_plan', false)
    WHERE NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`,
];

export function createPgDb(opts: PgDbOptions): Db {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
  const named = opts.preparedStatements ?? true;
  const statementTimeoutMs = opts.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
  // Statements inside a transaction (migrations, the sweeper) may run as
  // long as the server allows them, plus the round trip.
  const txTimeoutMs = statementTimeoutMs + timeoutMs;
  const pool = new pg.Pool({
    connectionString: opts.connectionString,
    max: opts.max,
    ...(opts.idleTimeoutMs === undefined ? {} : { idleTimeoutMillis: opts.idleTimeoutMs }),
    connectionTimeoutMillis: timeoutMs,
    keepAlive: true,
    keepAliveInitialDelayMillis: KEEPALIVE_IDLE_MS,
    application_name: 'idempotency-proxy',
    // PgBouncer refuses a startup packet naming statement_timeout.
    ...(named ? { statement_timeout: statementTimeoutMs, onConnect: (c: pg.ClientBase) => applySessionSettings(c, timeoutMs) } : {}),
  });
  // An idle client losing its connection must not crash the process.
  pool.on('error', (err) => opts.onError?.(err));
  // Nor one that is checked out: its statement gets the error (pg emits it
  // on the client too), and the pool drops it on release.
  pool.on('connect', (client) => client.on('error', ignore));
  const spent = (): StoreTimeoutError => new StoreTimeoutError('spent before this statement was sent', timeoutMs);
  const config = named
    ? (stmt: Statement, values: readonly unknown[]): pg.QueryConfig => ({ name: stmt.name, text: stmt.text, values: values as unknown[] })
    : (stmt: Statement, values: readonly unknown[]): pg.QueryConfig => ({ text: stmt.text, values: values as unknown[] });

  async function query<R>(stmt: Statement, values: readonly unknown[], ms?: number): Promise<R[]> {
    const budget = ms === undefined || ms > timeoutMs ? timeoutMs : ms;
    // What is left of the request's store.timeout can be spent before this statement: a claim's first statement,
    // answered late, leaves its second none. Refused unsent and at once, naming the bound the operator set: no
    // connection taken, no timer of a negative length (Node 24 warns of one), no "within -480 ms".
    if (budget < 1) throw spent();
    const t0 = performance.now();
    const client = await acquire(pool, budget);
    const left = budget - (performance.now() - t0);
    if (left < 1) {
      client.release();
      throw new StoreTimeoutError('waiting for a connection', budget);
    }
    let failure: unknown;
    try {
      return (await bounded(client, config(stmt, values), left)).rows as R[];
    } catch (err) {
      failure = err;
      // Sent: it may have taken effect, its reply lost (a claim that did is given back: src/lifecycle/give-back.ts).
      if (err instanceof StoreUnavailableError) err.maybeApplied = true;
      throw err;
    } finally {
      release(client, failure);
    }
  }

  async function transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    const client = await acquire(pool, timeoutMs);
    let failure: unknown;
    try {
      await bounded(client, { text: 'BEGIN' }, timeoutMs);
      const tx: Queryable = {
        query: async <R>(stmt: Statement, values: readonly unknown[], ms?: number) => {
          const budget = Math.min(ms ?? txTimeoutMs, txTimeoutMs);
          if (budget < 1) throw spent();
          return (await bounded(client, config(stmt, values), budget)).rows as R[];
        },
      };
      const result = await fn(tx);
      await bounded(client, { text: 'COMMIT' }, timeoutMs);
      return result;
    } catch (err) {
      failure = err;
      if (!isUnavailable(err)) {
        // A statement failed; the connection is fine once rolled back.
        await bounded(client, { text: 'ROLLBACK' }, timeoutMs).catch((e: unknown) => { failure = e; });
      }
      throw wrap(err);
    } finally {
      // Destroyed when the store failed on it: the server rolls back.
      release(client, failure);
    }
  }

  return {
    singleInstance: false,
    timeoutMs,
    description: `PostgreSQL ${maskUrl(opts.connectionString)}${named ? '' : ' (unnamed statements)'}`,
    query,
    transaction,
    close: () => pool.end(),
  };
}

const ignore = (): void => {};

/** Bounded like every round trip: a connection that hangs here is never handed out. */
async function applySessionSettings(client: pg.ClientBase, timeoutMs: number): Promise<void> {
  for (const text of SESSION_SETTINGS) {
    await bounded(client, { text }, timeoutMs).catch((err: unknown) => {
      if (isUnavailable(err)) throw err;
    });
  }
}
