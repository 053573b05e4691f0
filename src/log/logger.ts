import { hash } from 'node:crypto';
import { writeSync } from 'node:fs';
import pino, { type Logger, type DestinationStream } from 'pino';

export type { Logger };

const SLEEP = new Int32Array(new SharedArrayBuffer(4));

/**
 * Log lines to stdout, written in batches (up to 16 KiB, at least every
 * 200 ms, and at exit) rather than one write per line: one line per request
 * is the contract, one syscall per line is not.
 *
 * Each line is encoded into one reusable buffer as it arrives (a single UTF-8
 * pass) and the buffer is written with fs.writeSync: no string is kept
 * between requests, joined, measured or converted again (writing strings
 * through SonicBoom measured and encoded every batch two to three times,
 * about 11 000 instructions per request under callgrind; bench/README.md, history).
 *
 * Writes are synchronous, as pino's default: a stalled log reader slows the
 * proxy rather than growing its memory without bound. A full non-blocking
 * pipe (EAGAIN) is waited out; a destination that fails otherwise (EPIPE, a
 * closed fd) loses the batch, and the first such error is reported on stderr,
 * but the proxy keeps serving. A SIGKILL can lose the last 200 ms of lines.
 */
export class BatchedStdout implements DestinationStream {
  private buf: Buffer | null = null; // allocated on the first line: a silent logger never needs it
  private used = 0;
  private timer: NodeJS.Timeout | null = null;
  private failed = false;

  constructor(
    private readonly fd = 1,
    private readonly flushAt = 16 * 1024,
    private readonly intervalMs = 200,
  ) {
    flushAtExit(this);
  }

  write(line: string): void {
    // Room for a full batch plus the largest line that still fits after it.
    const buf = (this.buf ??= Buffer.allocUnsafeSlow(this.flushAt * 4));
    // A UTF-16 code unit never takes more than 3 bytes in UTF-8.
    if (line.length * 3 > buf.length - this.used) {
      this.flushSync();
      if (line.length * 3 > buf.length) {
        this.writeAll(Buffer.from(line, 'utf8'), -1);
        return;
      }
    }
    this.used += buf.write(line, this.used);
    if (this.used >= this.flushAt) this.flushSync();
    else if (this.timer === null) {
      // Armed on the first pending line only: an idle logger has no timer.
      this.timer = setTimeout(() => {
        this.timer = null;
        this.flushSync();
      }, this.intervalMs);
      this.timer.unref();
    }
  }

  flushSync(): void {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    if (this.used === 0) return;
    const n = this.used;
    this.used = 0;
    this.writeAll(this.buf!, n);
  }

  /** pino's logger.flush() */
  flush(cb?: (err?: Error) => void): void {
    this.flushSync();
    cb?.();
  }

  private writeAll(data: Buffer, length: number): void {
    const end = length < 0 ? data.length : length;
    let off = 0;
    while (off < end) {
      try {
        off += writeSync(this.fd, data, off, end - off);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'EAGAIN' || code === 'EBUSY') {
          Atomics.wait(SLEEP, 0, 0, 10); // the reader is behind: wait for it, do not buffer without bound
          continue;
        }
        if (!this.failed) {
          this.failed = true;
          try {
            writeSync(2, `idempotency-proxy: log lines are being lost: writing to fd ${this.fd} failed (${code ?? String(err)})\n`);
          } catch {
            // stderr is gone too
          }
        }
        return;
      }
    }
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

/** The length of keyHash()'s hashes: lower-case hex digits. */
export const KEY_HASH_LENGTH = 12;

/** Keys appear in logs (and spans) only as a short hash. */
export function keyHash(tenantId: string, key: string): string {
  return hash('sha256', `${tenantId}\u0000${key}`, 'hex').slice(0, KEY_HASH_LENGTH);
}
