import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { UpstreamError } from '../errors.js';
import { dispatch } from './forward.js';
import { clientResponseHeadersRaw } from './headers.js';
import { RelayHandler, type RelaySink } from './relay-handler.js';
import { holdForClient } from './slow-client.js';
import { classify, cutOff, droppedUnsent, noConnectionInTime, type Upstream } from './upstream.js';

// The record handler: an undici dispatch handler for a request that owns its
// key. The answer streams to the client as it arrives while its body is
// collected for the record (up to a limit), and its last chunk is held back:
// the Recorder ends the client's response, after the commit. A client that
// leaves changes nothing: the exchange runs to its end. A client that reads
// slower than the upstream sends holds the upstream back (backpressure); one
// that reads nothing for sendTimeoutMs is cut off, and counts as gone
// (slow-client.ts). upstream.timeout bounds the whole exchange, but for the
// time a slow client holds it back, with a timer of the proxy's own, armed
// when the request is handed to undici, so the wait for a free connection
// counts too: a request still waiting when it runs out is never sent (not_sent, the key
// released), and is dropped when its connection comes. Undici's headers and
// body timeouts, on its coarse clock, are only a backstop. An answer the
// recorder does not record (a releaseOn status) waits,
// unread, until the recorder calls proceed(); the rest then goes through a
// RelayHandler, unrecorded.

/** What a recorded exchange holds, for its Recorder. */
export interface Recording {
  /** The upstream's final status, 0 until it arrived. */
  readonly statusCode: number;
  /** The response headers as sent to the client (hop-by-hop removed), flat [name, value, …]. */
  readonly headers: readonly string[] | null;
  /** The status line went to the client. */
  readonly started: boolean;
  /** Bytes of body received. */
  readonly size: number;
  /** Bytes of body held for the record, counted in the memory budget (given back by the caller when done). */
  readonly buffered: number;
  /** The body was collected whole (it stayed within the limit). */
  readonly retained: boolean;
  /** The held-back last chunk. */
  readonly last: Buffer | null;
  /** The collected body (empty if it was not retained). */
  body(): Buffer;
  /** The proxy cut the client's response: the client read nothing of it for sendTimeoutMs (the exchange went on). */
  readonly unread: boolean;
  /** How long a client that read slower than the upstream sent held the upstream back: not the upstream's time. */
  readonly heldMs: number;
  /** After head() answered false: streams the rest unrecorded; the handler ends the client's response. */
  proceed(): void;
  /** Within head() only: one more header line for the client (an echoKey route's Idempotency-Key). */
  addHeader(name: string, value: string): void;
}

/** The owner of a recorded exchange. */
export interface Recorder {
  /**
   * The final status line arrived; nothing has gone to the client yet.
   * True: the response streams to the client and is recorded. False: the
   * upstream is not read until the recorder calls `recording.proceed()`.
   */
  head(recording: Recording, statusCode: number): boolean;
  /**
   * Called once, when the exchange is over. `error` null: the body is
   * complete and its last chunk held back; the client's response is not
   * ended (unless the exchange was proceed()ed). Otherwise the upstream
   * failed and the client's response is left as it is: `statusCode` and
   * `started` tell how far the exchange had got.
   */
  end(recording: Recording, error: UpstreamError | null): void;
}

export interface RecordOptions {
  /** Body bytes kept for the record (maxStoredResponseBytes). */
  readonly limit: number;
  /** upstream.timeout: the whole exchange, but for the time a slow client holds the upstream back. */
  readonly timeoutMs: number;
  /** performance.now() when the exchange began: upstream.timeout counts from it. */
  readonly startedAt: number;
  /** How long a client may read nothing of its response (while the upstream is held back) before it is cut off. */
  readonly sendTimeoutMs: number;
  /** Headers the proxy adds to the upstream request, [name, value, …]. */
  readonly extraHeaders?: readonly string[] | null;
  /** Where the collected body is counted (limits.maxBufferedBytes). */
  readonly budget?: { take(n: number): void; give(n: number): void } | null;
}

const EMPTY = Buffer.alloc(0);

/** After proceed(): the relay's one report ends the recorded exchange; its holds stop upstream.timeout too. */
const RELAYED: RelaySink<RecordHandler> = {
  head: () => {},
  end: (h, error) => h.relayEnded(error),
  held: (h, holding) => (holding ? h.holdStart() : h.holdEnd(false)),
};

function timedOut(h: RecordHandler): void {
  h.timer = null;
  h.timedOut();
}

export class RecordHandler implements Dispatcher.DispatchHandler, Recording {
  timer: NodeJS.Timeout | null = null;
  statusCode = 0;
  headers: string[] | null = null;
  size = 0;
  buffered = 0;
  last: Buffer | null = null;
  unread = false;
  heldMs = 0;
  readonly timeoutMs: number;
  private readonly sendTimeoutMs: number;
  /** When upstream.timeout runs out, but for the time the client held the upstream back. */
  private deadline: number;
  /** While the client holds the upstream back: since when (else 0), and the time upstream.timeout had left (else -1). */
  private heldAt = 0;
  private left = -1;
  private readonly budget: RecordOptions['budget'];
  private readonly limit: number;
  private written = false;
  private abort: ((err?: Error) => void) | null = null;
  private chunks: Buffer[] | null = null; // the body so far, null once past the limit
  private resume: (() => void) | null = null;
  private unpause: ((unread: boolean) => void) | null = null;
  private ended = false;
  private paused = false; // waiting for the recorder's proceed()
  private failure: Error | null = null; // an error that arrived while paused
  private relay: RelayHandler<RecordHandler> | null = null; // after proceed()

  constructor(private readonly res: ServerResponse, private readonly recorder: Recorder, opts: RecordOptions) {
    this.limit = opts.limit;
    this.timeoutMs = opts.timeoutMs;
    this.sendTimeoutMs = opts.sendTimeoutMs;
    this.deadline = opts.startedAt + opts.timeoutMs;
    this.budget = opts.budget ?? null;
    // The whole exchange's bound, from the dispatch on: the wait for a connection, then the request and the
    // answer. Not undici's headers timeout: it starts only once the request is written, and runs on undici's
    // coarse clock (ticks of about half a second), so a 400 ms upstream.timeout fired after 0.5–1 s, later
    // under load, and an answer arriving meanwhile was taken (test/policies/unknown-outcome.test.ts).
    this.timer = setTimeout(timedOut, this.timeoutMs, this);
  }

  get started(): boolean {
    return this.relay !== null ? this.relay.started : this.written;
  }

  get retained(): boolean {
    return this.chunks !== null;
  }

  body(): Buffer {
    const chunks = this.chunks;
    if (chunks === null || chunks.length === 0) return EMPTY;
    return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, this.size);
  }

  /**
   * Undici is about to write the request (it calls this right before, in the same turn). A request whose
   * upstream.timeout ran out while it waited for the connection was answered already: it is dropped unsent.
   */
  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
    if (this.ended) abort(droppedUnsent());
  }

  /** upstream.timeout ran out: the request is cut off, or, not yet written, never will be. */
  timedOut(): void {
    if (cutOff(this.abort, this.timeoutMs)) return;
    // Still waiting for a connection to the upstream: not a byte of it was sent (onConnect has not run).
    this.finish();
    this.recorder.end(this, noConnectionInTime(this.timeoutMs));
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true; // 1xx: the final answer follows
    if (this.ended) return false;
    this.statusCode = statusCode;
    this.resume = resume;
    this.headers = clientResponseHeadersRaw(rawHeaders);
    if (!this.recorder.head(this, statusCode)) {
      this.paused = true;
      return false;
    }
    this.chunks = [];
    const res = this.res;
    if (!res.destroyed) {
      this.written = true;
      res.writeHead(statusCode, this.headers);
    }
    return true;
  }

  addHeader(name: string, value: string): void {
    this.headers!.push(name, value);
  }

  proceed(): void {
    this.paused = false;
    const failure = this.failure;
    if (failure !== null) {
      this.failure = null;
      this.finish();
      this.recorder.end(this, classify(failure));
      return;
    }
    if (this.ended) return;
    const relay = (this.relay = new RelayHandler(this.res, RELAYED, this, this.sendTimeoutMs));
    relay.onConnect(this.abort!);
    let relayed: boolean;
    try {
      relayed = relay.start(this.statusCode, this.headers!, this.resume!);
    } catch (err) {
      // writeHead refused the upstream's headers: a failed exchange, reported through onError.
      this.abort!(err as Error);
      return;
    }
    if (relayed) this.resume!();
  }

  onData(chunk: Buffer): boolean {
    if (this.relay !== null) return this.relay.onData(chunk);
    if (this.ended) return false;
    const size = (this.size += chunk.length);
    const chunks = this.chunks;
    if (chunks !== null) {
      const budget = this.budget;
      if (size <= this.limit) {
        chunks.push(chunk);
        if (budget != null) {
          budget.take(chunk.length);
          this.buffered += chunk.length;
        }
      } else {
        // Past the record's limit the body is not kept: its bytes are free again.
        this.chunks = null;
        if (budget != null) budget.give(this.buffered);
        this.buffered = 0;
      }
    }
    const prev = this.last;
    this.last = chunk;
    const res = this.res;
    if (prev === null || res.destroyed || res.write(prev)) return true;
    // Wait for the client to drain, or to leave (then the rest is only recorded); cut it if it reads nothing.
    this.holdStart();
    holdForClient(res, this.sendTimeoutMs, (this.unpause ??= (unread) => {
      this.holdEnd(unread);
      if (!this.ended) this.resume!();
    }));
    return false;
  }

  /** The client holds the upstream back: the wait is not the upstream's, upstream.timeout stops. */
  holdStart(): void {
    if (this.ended) return;
    const now = (this.heldAt = performance.now());
    const timer = this.timer;
    if (timer === null) return;
    clearTimeout(timer);
    this.timer = null;
    this.left = Math.max(0, this.deadline - now);
  }

  /** The client drained, left, or was cut off for reading nothing: upstream.timeout runs on with the time it had left. */
  holdEnd(unread: boolean): void {
    if (unread) this.unread = true;
    const heldAt = this.heldAt;
    if (heldAt === 0) return;
    const now = performance.now();
    this.heldAt = 0;
    this.heldMs += now - heldAt;
    const left = this.left;
    this.left = -1;
    if (left < 0 || this.ended) return;
    this.deadline = now + left;
    this.timer = setTimeout(timedOut, left, this);
  }

  onComplete(): void {
    if (this.relay !== null) return this.relay.onComplete();
    if (this.ended) return;
    this.finish();
    this.recorder.end(this, null);
  }

  onError(err: Error): void {
    if (this.relay !== null) return this.relay.onError(err);
    if (this.ended) return;
    if (this.paused) {
      this.failure ??= err; // reported when the recorder proceeds
      return;
    }
    this.finish();
    this.recorder.end(this, classify(err));
  }

  /** The relay that took over after proceed() is done. */
  relayEnded(error: UpstreamError | null): void {
    this.finish();
    this.recorder.end(this, error);
  }

  private finish(): void {
    this.ended = true;
    const timer = this.timer;
    if (timer !== null) {
      this.timer = null;
      clearTimeout(timer);
    }
  }
}

/**
 * Forwards `req` with its buffered body and streams the answer into `res`
 * while recording it; the recorder ends the response.
 */
export function recordUpstream(upstream: Upstream, req: IncomingMessage, body: Buffer, res: ServerResponse, recorder: Recorder, opts: RecordOptions): void {
  dispatch(upstream, req, body, opts.extraHeaders ?? null, new RecordHandler(res, recorder, opts));
}
