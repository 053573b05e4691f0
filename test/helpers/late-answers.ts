import type { Db, Statement } from '../../src/store/db/port.js';
import { sleep } from './wait.js';

// The real store, whose answers to some statements reach the caller late. Every statement runs at once on the
// real database and its rows are handed on as they came: nothing is made up, only when the caller hears the
// answer moves — as when PostgreSQL's reply is slow on the wire. For the gaps between a statement that took
// effect and the next one (a claim's takeover, a commit's second read, a batch that fails after part of it).

export interface Hold {
  /** A value the held statements carry: a tenant or key, at any depth of their arrays. */
  readonly match: string;
  /** The answer is handed on `ms` after it came, and not before `until` settles. */
  readonly ms?: number;
  readonly until?: Promise<void>;
  /** The values of every statement this hold held. */
  readonly seen: Array<readonly unknown[]>;
}

/** `values` name `s` (at any depth of their arrays). */
export function names(values: readonly unknown[], s: string): boolean {
  return values.some((v) => v === s || (Array.isArray(v) && names(v, s)));
}

/**
 * `real`, with the answers to statements that name a hold's `match` handed on late, for as long as the hold is in
 * `holds` (a set the test may change). `timeoutMs`: the store.timeout it says it has (a KeyStore's budgets).
 */
export function holdingAnswers(real: Db, holds: Iterable<Hold>, timeoutMs: number | null = real.timeoutMs): Db {
  return {
    singleInstance: real.singleInstance,
    timeoutMs,
    description: real.description,
    query: async <R>(stmt: Statement, values: readonly unknown[], ms?: number): Promise<R[]> => {
      const rows = await real.query<R>(stmt, values, ms);
      for (const h of holds) {
        if (!names(values, h.match)) continue;
        h.seen.push(values);
        if (h.until !== undefined) await h.until;
        if (h.ms !== undefined) await sleep(h.ms);
      }
      return rows;
    },
    transaction: (fn) => real.transaction(fn),
    close: () => real.close(),
  };
}
