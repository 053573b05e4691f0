import type { ServerResponse } from 'node:http';
import { cutResponse } from '../http/respond.js';

// A client that reads slower than the upstream sends: `res.write` answered
// false, and the exchange holds the upstream back (undici's resume) until the
// client's response drains. The wait is the client's, not the upstream's: the
// handlers stop their upstream.timeout while it lasts (record-handler.ts) or
// rely on undici, whose body timeout does not run while a response is paused.
// But a client that reads nothing at all would hold an upstream connection
// (and a claimed key) forever: after `sendTimeoutMs` without a drain its
// response is cut (like nginx's send_timeout), which closes it, and the
// exchange goes on as for a client that left.

/** What a hold reports: the response drained (or closed), and whether the proxy cut it for reading nothing. */
export type HoldEnd = (unread: boolean) => void;

/**
 * Waits for `res` to drain or close; `done` runs once. After `sendTimeoutMs` without either, `res` is cut and
 * `done(true)` runs at once, before the response's 'close' (which follows).
 */
export function holdForClient(res: ServerResponse, sendTimeoutMs: number, done: HoldEnd): void {
  if (res.destroyed) {
    // Closed already (its 'close' may have run): nothing to wait for. Not within the caller's onData, which
    // pauses undici when it returns.
    process.nextTick(done, false);
    return;
  }
  const end = (): void => {
    clearTimeout(timer);
    res.off('drain', end).off('close', end);
    done(false);
  };
  // Cut, then reported at once: before the response's 'close', so that whoever watches for it knows why.
  const timer = setTimeout(() => {
    res.off('drain', end).off('close', end);
    cutResponse(res);
    done(true);
  }, sendTimeoutMs);
  res.on('drain', end).on('close', end);
}

/**
 * A response written whole (a replay: its body handed to Node at once) that its client does not read: Node would
 * keep its unsent bytes, and the connection, for as long as the client stays. Each `sendTimeoutMs` without a byte
 * of it going out, it is cut. Only for a body larger than the socket takes at once: the caller asks.
 */
export function cutIfUnread(res: ServerResponse, sendTimeoutMs: number): void {
  if (res.writableFinished || res.destroyed) return;
  let unsent = res.writableLength;
  const check = (): void => {
    if (res.writableFinished || res.destroyed) return;
    const now = res.writableLength;
    if (now < unsent) {
      unsent = now;
      timer.refresh();
    } else {
      cutResponse(res);
    }
  };
  const timer = setTimeout(check, sendTimeoutMs);
  const stop = (): void => clearTimeout(timer);
  res.once('finish', stop).once('close', stop);
}
