import { hash } from 'node:crypto';
import pino, { type Logger, type DestinationStream } from 'pino';

export type { Logger };

/**
 * Log lines to stdout, written in batches (up to 16 KiB, at least every
 * 200 ms, and at exit) rather than one write per line: one line per request
 * is the contract, one syscall per line is not. The batch is kept as an array
 * of lines and joined once per write (SonicBoom's own minLength buffering
 * re-measures its whole buffer on every line, which costs more than the line).
 * Writes are synchronous, as pino's default: a stalled log reader slows the
 * proxy rather than growing its memory without bound. A SIGKILL can lose the
 * last 200 ms of lines.
 */
export class BatchedStdout implements DestinationStream {
  private parts: string[] = [];
  private size = 0;
  private readonly out: ReturnType<typeof pino.destination>;

  constructor(fd = 1, private readonly maxChars = 16 * 1024, intervalMs = 200) {
    this.out = pino.destination({ fd, sync: true });
    setInterval(() => this.flushSync(), intervalMs).unref();
    flushAtExit(this);
  }

  write(line: string): void {
    this.parts.push(line);
    this.size += line.length;
    if (this.size >= this.maxChars) this.flushSync();
  }

  flushSync(): void {
    if (this.size === 0) return;
    const chunk = this.parts.length === 1 ? this.parts[0]! : this.parts.join('');
    this.parts = [];
    this.size = 0;
    this.out.write(chunk);
  }

  /** pino's logger.flush() */
  flush(cb?: (err?: Error) => void): void {
    this.flushSync();
    cb?.();
  }
}

// One exit hook for every batched destination (a listener each would trip
// Node's max-listeners warning in a process that builds many loggers).
const unflushed = new Set<BatchedStdout>();
function flushAtExit(d: BatchedStdout): void {
  if (unflushed.size === 0) process.once('exit', () => { for (const x of unflushed) x.flushSync(); });
  unflushed.add(d);
}

/** The JSON logger: to `destination`, or to stdout in batches (BatchedStdout). */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'idempotency-proxy' },
      // epoch milliseconds (pino's default): an ISO string per line costs more than the rest of the line
      formatters: { level: (label) => ({ level: label }) },
    },
    destination ?? new BatchedStdout(),
  );
}

/** Keys appear in logs only as a short hash. */
export function keyHash(tenantId: string, key: string): string {
  return hash('sha256', `${tenantId}\u0000${key}`, 'hex').slice(0, 12);
}
