import { StoreUnavailableError } from './port.js';

// Errors that mean "the database could not be reached, dropped us or did not
// answer in time", as opposed to a bug in a statement. They become
// StoreUnavailableError (→ 503 store-unavailable with Retry-After).
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
  if (err instanceof StoreUnavailableError) return true;
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: string }).code;
  if (code !== undefined && (UNAVAILABLE_CODES.has(code) || (code.length === 5 && UNAVAILABLE_CLASSES.test(code)))) return true;
  return /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|connection ended|Connection closed|Client was closed/i.test(err.message);
}

export function wrap(err: unknown): unknown {
  if (err instanceof StoreUnavailableError) return err;
  if (isUnavailable(err)) return new StoreUnavailableError(`PostgreSQL unavailable: ${(err as Error).message}`, { cause: err });
  return err;
}

/** The store did not answer within store.timeout: treated as unreachable. */
export class StoreTimeoutError extends StoreUnavailableError {
  constructor(what: string, ms: number) {
    super(`PostgreSQL did not answer within ${Math.round(ms)} ms (${what}; store.timeout)`);
  }
}
