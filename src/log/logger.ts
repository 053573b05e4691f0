import { createHash } from 'node:crypto';
import pino, { type Logger, type DestinationStream } from 'pino';

export type { Logger };

/**
 * The JSON logger. Lines to stdout are written in batches (up to 8 KiB, at
 * least every 200 ms) rather than one write per request: one line per request
 * is the contract, one syscall per line is not. A crash can lose the last
 * 200 ms of lines; `flush()` writes them on shutdown.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  let dest = destination;
  if (dest === undefined) {
    const boom = pino.destination({ fd: 1, sync: false, minLength: 8 * 1024 });
    const timer = setInterval(() => boom.flush(), 200);
    timer.unref();
    dest = boom;
  }
  return pino(
    {
      level,
      base: { service: 'idempotency-proxy' },
      // epoch milliseconds (pino's default): an ISO string per line costs more than the rest of the line
      formatters: { level: (label) => ({ level: label }) },
    },
    dest,
  );
}

/** Keys appear in logs only as a short hash. */
export function keyHash(tenantId: string, key: string): string {
  return createHash('sha256').update(tenantId).update('\u0000').update(key).digest('hex').slice(0, 12);
}
