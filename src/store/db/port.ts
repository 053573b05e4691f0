// The one-method database port (graphile-worker / pg-boss style): the same SQL
// runs on a pg.Pool and on the embedded PGlite. Statements are named so pg
// prepares them once per connection (unless store.preparedStatements is false:
// docs/configuration.md).

export interface Statement {
  readonly name: string;
  readonly text: string;
}

export interface Queryable {
  /**
   * `timeoutMs`: the bound on this round trip (the wait for a connection
   * included) when shorter than the store's own; a store that does not answer
   * within it rejects with StoreUnavailableError. Under 1 ms (what is left of a
   * request's store.timeout, spent): refused at once, unsent, the same way.
   */
  query<R = Record<string, unknown>>(stmt: Statement, values: readonly unknown[], timeoutMs?: number): Promise<R[]>;
}

export interface Db extends Queryable {
  /** Runs fn inside one transaction on one connection. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /** True for a store only one process may use (embedded PGlite). */
  readonly singleInstance: boolean;
  /** store.timeout: the bound on every round trip; null where none applies (embedded PGlite). */
  readonly timeoutMs: number | null;
  readonly description: string;
  close(): Promise<void>;
}

export { StoreUnavailableError } from '../../errors.js';

/**
 * What is left at this moment of a `timeoutMs` budget whose first round trip started at `t0` (performance.now()):
 * the bound for the next statement of the same operation, so that its statements share one bound.
 */
export function budgetLeft(budgetMs: number | undefined, t0: number): number | undefined {
  return budgetMs === undefined ? undefined : budgetMs - (performance.now() - t0);
}

/** Binary columns come back as Buffer from pg and as Uint8Array from PGlite. */
export function toBuffer(value: unknown): Buffer | null {
  if (value == null) return null;
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  throw new TypeError('expected binary column');
}
