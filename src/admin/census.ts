import type { Db } from '../store/db/port.js';
import { censusChunkStatement } from '../store/sql/census.js';

// The key census behind the outcome-unknown and oldest-in-flight gauges
// (docs/operations.md, Metrics). No index tells those rows apart (one on
// state would cost every commit its HOT update, docs/storage.md), so the
// census walks the primary key: each tick reads one bounded chunk (an index
// range scan of at most chunkRows rows), and a pass is the chunks from the
// first key to the last. At the end of a pass the totals are published. A
// table of up to chunkRows rows is counted in full every tick; a larger one
// every rows / chunkRows ticks. Never on the request path.

export interface CensusResult {
  readonly outcomeUnknown: number;
  /** performance.now() at which the oldest in-flight key was created; null: none in flight. */
  readonly oldestBornAt: number | null;
}

export interface CensusOptions {
  readonly intervalMs: number;
  readonly chunkRows: number;
  readonly onPass: (r: CensusResult) => void;
  readonly onError?: (err: unknown) => void;
}

interface ChunkRow {
  scanned: number;
  outcome_unknown: number;
  oldest_in_flight_s: number | null;
  last_tenant: string | null;
  last_key: string | null;
}

export function startKeyCensus(db: Db, opts: CensusOptions): { stop(): void } {
  let cursor: [string, string] = ['', ''];
  let unknown = 0;
  let oldest: number | null = null;
  let running = false;
  const tick = async (): Promise<void> => {
    const [row] = await db.query<ChunkRow>(censusChunkStatement, [cursor[0], cursor[1], opts.chunkRows]);
    if (row === undefined) return;
    unknown += row.outcome_unknown;
    if (row.oldest_in_flight_s !== null) {
      const born = performance.now() - row.oldest_in_flight_s * 1000;
      oldest = oldest === null ? born : Math.min(oldest, born);
    }
    if (row.scanned < opts.chunkRows || row.last_tenant === null) {
      opts.onPass({ outcomeUnknown: unknown, oldestBornAt: oldest });
      cursor = ['', ''];
      unknown = 0;
      oldest = null;
    } else {
      cursor = [row.last_tenant, row.last_key!];
    }
  };
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    tick().catch((e: unknown) => opts.onError?.(e)).finally(() => { running = false; });
  }, opts.intervalMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
