import type pg from 'pg';
import { StoreTimeoutError, isUnavailable, wrap } from './pg-errors.js';

// Every round trip to PostgreSQL with a bound (store.timeout,
// docs/configuration.md): a server that stops answering — a partition, a hung
// server, a half-dead connection — is the same as one that refuses. The
// connection a statement hung on is destroyed, never handed out again: its
// protocol state is unknown and the next statement on it would hang too.

/** A pooled connection within `ms`, the wait for a free one included. */
export function acquire(pool: pg.Pool, ms: number): Promise<pg.PoolClient> {
  return new Promise((resolve, reject) => {
    let late = false;
    const timer = setTimeout(() => {
      late = true;
      reject(new StoreTimeoutError('waiting for a connection', ms));
    }, ms);
    pool.connect().then(
      (client) => {
        if (!late) {
          clearTimeout(timer);
          resolve(client);
        } else client.release();
      },
      (err: unknown) => {
        clearTimeout(timer);
        if (!late) reject(wrap(err));
      },
    );
  });
}

/**
 * One statement on `client` within `ms`. After a timeout the caller ends the
 * client (`release(client, err)`, or `end()`): pg ends a client whose query is
 * still active by destroying its socket.
 */
export function bounded(client: pg.ClientBase, config: pg.QueryConfig, ms: number): Promise<pg.QueryResult> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new StoreTimeoutError('statement', ms));
    }, ms);
    client.query(config).then(
      (res) => {
        clearTimeout(timer);
        resolve(res);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(wrap(err));
      },
    );
  });
}

/** Releases a client after a statement: destroyed when the store failed on it. */
export function release(client: pg.PoolClient, err: unknown): void {
  client.release(isUnavailable(err) ? (err as Error) : undefined);
}
