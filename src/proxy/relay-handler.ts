import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { UpstreamError } from '../errors.js';
import { cutResponse } from '../http/respond.js';
import { dispatch } from './forward.js';
import { clientResponseHeadersRaw } from './headers.js';
import { holdForClient } from './slow-client.js';
import { classify, droppedUnsent, noConnectionInTime, type Upstream } from './upstream.js';

// The relay handler: an undici dispatch handler that writes the upstream's
// answer straight into the client's response as it arrives. Nothing sits in
// between: the raw header lines go to writeHead, body chunks to res.write
// with backpressure from a slow client to the upstream; no body stream, no
// async iteration, no promise. A client that leaves aborts the exchange, and
// so does one that reads nothing for sendTimeoutMs: its response is cut
// (slow-client.ts), so it cannot hold an upstream connection for ever.
// Bounded by undici's headers and body timeouts (upstream.timeout each; the
// body timeout is an idle timeout) once written; before that, a request that
// waits for a connection (every one of upstream.connections busy) waits at
// most upstream.timeout, then gets 502 and is dropped unsent — a timer armed
// only when the pool was saturated at dispatch, so the usual request pays
// one test of dispatch's answer. A client that leaves while its request
// waits for a connection ends the exchange there: the request is dropped
// unsent when the connection comes (a pass-through POST whose client gave up
// is never run behind its back). The record handler (record-handler.ts)
// hands the rest of an exchange to one of these after a release.

/**
 * How a client ended an exchange before it was over: it closed its connection before the response was complete
 * ('response'), broke off the request body being streamed to the upstream ('request'), or read nothing of the
 * response for sendTimeoutMs and was cut off by the proxy ('unread').
 */
export type ClientLeft = false | 'request' | 'response' | 'unread';

export interface RelaySink<T> {
  /** The upstream's final status line arrived (before anything is written to the client). */
  head(opaque: T, statusCode: number): void;
  /**
   * Called once. `error`: the upstream failed (if the status line had already
   * gone to the client, the response is cut off: `res.headersSent` tells).
   * `clientLeft`: the client ended it (ClientLeft); the upstream exchange is abandoned. `heldMs`: how long a
   * client that read slower than the upstream sent held the upstream back (not the upstream's time).
   */
  end(opaque: T, error: UpstreamError | null, clientLeft: ClientLeft, heldMs: number): void;
  /** The client holds the upstream back (true) until its response drains or closes (false). */
  held?(opaque: T, holding: boolean): void;
}

/**
 * The upstream answers before it has read the whole request body (an early 413 or 401, say). Undici will stop
 * sending the body and destroy the client's request stream, detached from its socket first (its util.destroy), so
 * Node neither reads the rest of the body nor closes the connection: the HTTP parser pushes each further chunk into
 * the destroyed request and stops reading. The client could never finish its body, and its next request on that
 * keep-alive connection would never be parsed. So the response says `Connection: close`: the client opens a new
 * connection for its next request, and Node closes this one once the response is sent. (Over HTTP/2 destroying the
 * request resets its stream alone, and the session goes on. A request the upstream read whole before it answered is
 * complete by then, and untouched.)
 */
function answeredEarly(upload: IncomingMessage, headers: string[]): void {
  if (upload.httpVersionMajor === 1) headers.push('connection', 'close');
}

class ClientGone extends Error {
  constructor() {
    super('the client closed the connection');
    this.name = 'ClientGone';
  }
}

export class RelayHandler<T> implements Dispatcher.DispatchHandler {
  /** The status line went to the client. */
  started = false;
  private abort: ((err?: Error) => void) | null = null;
  private resume: (() => void) | null = null;
  private ended = false;
  /** The bound of the wait for a connection (waitAtMost), until onConnect. */
  private timer: NodeJS.Timeout | null = null;
  /** The client left before the exchange was over (clientLeft). */
  private gone = false;
  /** The proxy cut the client's response for reading nothing (holdForClient). */
  private unread = false;
  private unpause: ((unread: boolean) => void) | null = null;
  /** The time the client held the upstream back, and since when it does (0: it does not). */
  private heldMs = 0;
  private heldAt = 0;

  constructor(
    private readonly res: ServerResponse,
    private readonly sink: RelaySink<T>,
    private readonly opaque: T,
    /** How long the client may read nothing of the response before it is cut off. */
    private readonly sendTimeoutMs: number,
    /** The client's request when its body is streamed to the upstream (not buffered): its failure is the client's. */
    private readonly upload: IncomingMessage | null = null,
  ) {}

  /**
   * The dispatch found every upstream connection busy: if it is not written by then (onConnect), it is answered
   * at `timeoutMs` as never sent (noConnectionInTime), and dropped unsent when a connection comes. A client
   * that leaves meanwhile ends it at once (clientLeft), and it is dropped unsent the same way.
   */
  waitAtMost(timeoutMs: number): void {
    if (this.abort !== null || this.ended) return; // written already (undici may write within dispatch), or over
    if (this.res.destroyed) {
      this.clientLeft(); // gone before the dispatch: its close has been emitted already
      return;
    }
    this.timer = setTimeout(queuedTooLong, timeoutMs, this, timeoutMs);
    this.watchClient();
  }

  /**
   * From now on, the client closing its connection before the exchange is over abandons it (clientLeft). A
   * request that waited for its connection is watched from waitAtMost and again from start: of the two listeners,
   * the first to run ends the exchange and the other finds it ended.
   */
  private watchClient(): void {
    this.res.once('close', () => {
      if (!this.ended) this.clientLeft();
    });
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
    if (this.timer !== null) this.stopTimer();
    if (this.ended) abort(this.gone ? new ClientGone() : droppedUnsent()); // its client left, or answered at the deadline (queuedTooLong)
  }

  private stopTimer(): void {
    clearTimeout(this.timer!);
    this.timer = null;
  }

  /**
   * waitAtMost's deadline, the request still unsent (onConnect and onError stop the timer): the client's answer
   * now, the request dropped when it gets a connection.
   */
  noConnection(timeoutMs: number): void {
    this.timer = null;
    this.ended = true;
    this.sink.end(this.opaque, noConnectionInTime(timeoutMs), false, 0);
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true; // 1xx: the final answer follows
    if (this.ended) return false;
    this.sink.head(this.opaque, statusCode);
    return this.start(statusCode, clientResponseHeadersRaw(rawHeaders), resume);
  }

  /** Writes the status line to the client; false (and the exchange abandoned) if the client had left. */
  start(statusCode: number, headers: string[], resume: () => void): boolean {
    const res = this.res;
    this.resume = resume;
    if (res.destroyed) {
      this.clientLeft();
      return false;
    }
    if (this.upload !== null && !this.upload.complete) answeredEarly(this.upload, headers);
    res.writeHead(statusCode, headers);
    this.started = true;
    this.watchClient();
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.ended) return false;
    const res = this.res;
    if (res.write(chunk)) return true;
    // The client reads slower than the upstream sends: pause until it drains (or leaves, or is cut off).
    this.heldAt = performance.now();
    this.sink.held?.(this.opaque, true);
    holdForClient(res, this.sendTimeoutMs, (this.unpause ??= (unread) => {
      this.heldMs += performance.now() - this.heldAt;
      this.sink.held?.(this.opaque, false);
      // Cut off: its 'close' follows and abandons the exchange (clientLeft, 'unread').
      if (unread) this.unread = true;
      else if (!this.ended) this.resume!();
    }));
    return false;
  }

  onComplete(): void {
    if (this.ended) return;
    this.ended = true;
    this.res.end();
    this.sink.end(this.opaque, null, false, this.heldMs);
  }

  onError(err: Error): void {
    if (this.timer !== null) this.stopTimer(); // refused before it was written: nothing left to wait for
    if (this.ended) return; // our own abort after the client left, or a late error
    this.ended = true;
    if (this.started) cutResponse(this.res);
    // The body being streamed failed: the client left (or broke off) in the middle of its own request. Node marks
    // such a request aborted: over HTTP/1.1 it also errs, and an HTTP/2 stream the client cancelled ends early.
    const u = this.upload;
    const clientLeft = u !== null && (u.aborted || (u.errored !== null && !u.complete));
    this.gone = clientLeft;
    this.sink.end(this.opaque, clientLeft ? null : classify(err), clientLeft ? 'request' : false, this.heldMs);
  }

  /** The client left: the exchange is abandoned (aborted if written; dropped unsent by onConnect if still waiting). */
  private clientLeft(): void {
    this.ended = true;
    this.gone = true;
    if (this.timer !== null) this.stopTimer();
    const abort = this.abort;
    if (abort !== null) abort(new ClientGone());
    this.sink.end(this.opaque, null, this.unread ? 'unread' : 'response', this.heldMs);
  }
}

function queuedTooLong(h: RelayHandler<unknown>, timeoutMs: number): void {
  h.noConnection(timeoutMs);
}

/** Forwards `req` (with `body`: the buffered body, the request stream itself, or none) and relays the answer into `res`. */
export function relayUpstream<T>(
  upstream: Upstream,
  req: IncomingMessage,
  body: Buffer | IncomingMessage | null,
  res: ServerResponse,
  sink: RelaySink<T>,
  opaque: T,
  sendTimeoutMs: number,
): void {
  const handler = new RelayHandler(res, sink, opaque, sendTimeoutMs, body !== null && !Buffer.isBuffer(body) ? body : null);
  if (!dispatch(upstream, req, body, null, handler)) handler.waitAtMost(upstream.timeoutMs);
}
