// The one-method database port (graphile-worker / pg-boss style): the same SQL
// runs on a pg.Pool and on the embedded PGlite. Statements are named so pg
// prepares them once per connection.

export interface Statement {
  readonly name: string;
  readonly text: string;
}

export interface Queryable {
  query<R = Record<string, unknown>>(stmt: Statement, values: readonly unknown[]): Promise<R[]>;
}

export interface Db extends Queryable {
  /** Runs fn inside one transaction on one connection. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /** True for a store only one process may use (embedded PGlite). */
  readonly singleInstance: boolean;
  readonly description: string;
  close(): Promise<void>;
}

export { StoreUnavailableError } from '../../errors.js';

/** Binary columns come back as Buffer from pg and as Uint8Array from PGlite. */
export function toBuffer(value: unknown): Buffer | null {
  if (value == null) return null;
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  throw new TypeError('expected binary column');
}
