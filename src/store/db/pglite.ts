import { mkdirSync } from 'node:fs';
import { type Db, type Queryable, type Statement } from './port.js';

interface PGliteLike {
  query<R>(text: string, params?: unknown[]): Promise<{ rows: R[] }>;
  transaction<T>(fn: (tx: { query<R>(text: string, params?: unknown[]): Promise<{ rows: R[] }> }) => Promise<T>): Promise<T>;
  close(): Promise<void>;
  waitReady: Promise<void>;
}

/**
 * The embedded store: real PostgreSQL compiled to WebAssembly, one process,
 * one data directory. Same SQL as the server; statements run one at a time.
 */
export async function createPgliteDb(dataDir: string | null): Promise<Db> {
  const { PGlite } = await import('@electric-sql/pglite');
  if (dataDir !== null) mkdirSync(dataDir, { recursive: true });
  const db = (dataDir === null ? new PGlite() : new PGlite(dataDir)) as unknown as PGliteLike;
  await db.waitReady;
  const wrapQ = (q: PGliteLike | Parameters<Parameters<PGliteLike['transaction']>[0]>[0]): Queryable => ({
    async query<R>(stmt: Statement, values: readonly unknown[]): Promise<R[]> {
      const res = await q.query<R>(stmt.text, values as unknown[]);
      return res.rows;
    },
  });
  const root = wrapQ(db);
  return {
    singleInstance: true,
    // In-process: no network to partition, no connection to hang on. A
    // statement is as slow as this process's CPU; store.timeout has no effect.
    timeoutMs: null,
    description: dataDir === null ? 'embedded PGlite (in memory)' : `embedded PGlite at ${dataDir}`,
    query: (stmt, values) => root.query(stmt, values),
    transaction: (fn) => db.transaction((tx) => fn(wrapQ(tx))),
    close: () => db.close(),
  };
}
