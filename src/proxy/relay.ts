import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { forwardHeaders } from './forward.js';
import { clientResponseHeadersRaw } from './headers.js';
import { TimeoutSignal, classify, type Upstream, type UpstreamError } from './upstream.js';

// The upstream exchange, as undici's dispatch handler itself: the answer is
// written straight into the client's response as it arrives. Nothing sits in
// between: no header object is built and walked again (the raw header lines
// go to writeHead), no body stream, no async iteration, no promise.
//
// One handler class serves both paths, so undici's call sites see one shape:
//   relay  (relayUpstream, pass-through): the handler ends the client's
//          response itself and reports once to a RelaySink; a client that
//          leaves aborts the exchange. Bounded by undici's headers and body
//          timeouts (upstream.timeout each).
//   record (recordUpstream, a request that owns its key): the body is
//          collected for the record (up to a limit) while it streams, its last
//          chunk is held back, and the Recorder decides when the client's
//          response ends (after the commit). A client that leaves changes
//          nothing: the exchange runs to its end. upstream.timeout bounds the
//          whole exchange: undici's headers timeout, then a timer for the rest.

export interface RelaySink<T> {
  /** The upstream's final status line arrived (before anything is written to the client). */
  head(opaque: T, statusCode: number): void;
  /**
   * Called once. `error`: the upstream failed (if the status line had already
   * gone to the client, the response is cut off: `res.headersSent` tells).
   * `clientLeft`: the client closed its connection before the response was
   * complete; the upstream exchange is abandoned.
   */
  end(opaque: T, error: UpstreamError | null, clientLeft: boolean): void;
}

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
  /** The body was collected whole (it stayed within the limit). */
  readonly retained: boolean;
  /** The held-back last chunk. */
  readonly last: Buffer | null;
  /** The collected body (empty if it was not retained). */
  body(): Buffer;
  /** After head() answered false: streams the rest unrecorded; the handler ends the client's response. */
  proceed(): void;
}

/** The owner of a recorded exchange (recordUpstream). */
export interface Recorder {
  /**
   * The final status line arrived; nothing has gone to the client yet.
   * True: the response streams to the client and is recorded. False: the
   * upstream is not read until the recorder calls `recording.proceed()`; the
   * response then streams unrecorded and the handler ends it (a rejection
   * whose key is released first).
   */
  head(recording: Recording, statusCode: number): boolean;
  /**
   * Called once, when the exchange is over (possibly before recordUpstream
   * returns). `error` null: the body is complete and its last chunk held back;
   * the client's response is not ended (unless the exchange was proceed()ed).
   * Otherwise the upstream failed and the client's response is left as it is:
   * `statusCode` and `started` tell how far the exchange had got.
   */
  end(recording: Recording, error: UpstreamError | null): void;
}

class ClientGone extends Error {
  constructor() {
    super('the client closed the connection');
    this.name = 'ClientGone';
  }
}

const EMPTY = Buffer.alloc(0);

function timedOut(h: ExchangeHandler<unknown>): void {
  h.timer = null;
  const abort = h.abort;
  if (abort !== null) abort(new TimeoutSignal(h.timeoutMs));
}

class ExchangeHandler<T> implements Dispatcher.DispatchHandler, Recording {
  abort: ((err?: Error) => void) | null = null;
  timer: NodeJS.Timeout | null = null;
  statusCode = 0;
  headers: string[] | null = null;
  started = false;
  size = 0;
  last: Buffer | null = null;
  private chunks: Buffer[] | null = null; // record mode: the body so far, null once past the limit
  private resume: (() => void) | null = null;
  private unpause: (() => void) | null = null;
  private ended = false;
  private paused = false; // record mode: waiting for the recorder's proceed()
  private failure: Error | null = null; // an error that arrived while paused
  private recording: boolean;

  constructor(
    private readonly res: ServerResponse,
    private readonly sink: RelaySink<T> | null,
    private readonly opaque: T,
    private readonly recorder: Recorder | null,
    private readonly limit: number,
    readonly timeoutMs: number,
    private readonly sentAt: number,
  ) {
    this.recording = recorder !== null;
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true; // 1xx: the final answer follows
    if (this.ended) return false;
    this.statusCode = statusCode;
    this.resume = resume;
    this.headers = clientResponseHeadersRaw(rawHeaders);
    const recorder = this.recorder;
    if (recorder === null) {
      this.sink!.head(this.opaque, statusCode);
      return this.relayHead();
    }
    const left = this.timeoutMs - (performance.now() - this.sentAt);
    this.timer = setTimeout(timedOut, left > 1 ? left : 1, this);
    if (!recorder.head(this, statusCode)) {
      this.recording = false;
      this.paused = true;
      return false;
    }
    this.chunks = [];
    const res = this.res;
    if (!res.destroyed) {
      this.started = true;
      res.writeHead(statusCode, this.headers);
    }
    return true;
  }

  proceed(): void {
    this.paused = false;
    const failure = this.failure;
    if (failure !== null) {
      this.failure = null;
      this.finish();
      this.recorder!.end(this, classify(failure));
      return;
    }
    if (this.ended) return;
    let relayed: boolean;
    try {
      relayed = this.relayHead();
    } catch (err) {
      // writeHead refused the upstream's headers: a failed exchange, as in onHeaders.
      this.abort!(err as Error);
      return;
    }
    if (relayed) this.resume!();
  }

  onData(chunk: Buffer): boolean {
    if (this.ended) return false;
    const res = this.res;
    if (!this.recording) {
      if (res.write(chunk)) return true;
      // The client reads slower than the upstream sends: pause until it drains.
      res.once('drain', this.resume!);
      return false;
    }
    const size = (this.size += chunk.length);
    const chunks = this.chunks;
    if (chunks !== null) {
      if (size <= this.limit) chunks.push(chunk);
      else this.chunks = null;
    }
    const prev = this.last;
    this.last = chunk;
    if (prev === null || res.destroyed || res.write(prev)) return true;
    // Wait for the client to drain, or to leave (then the rest is only recorded).
    const unpause = (this.unpause ??= () => {
      res.off('drain', unpause).off('close', unpause);
      if (!this.ended) this.resume!();
    });
    res.on('drain', unpause).on('close', unpause);
    return false;
  }

  onComplete(): void {
    if (this.ended) return;
    this.finish();
    if (this.recording) {
      this.recorder!.end(this, null);
      return;
    }
    this.res.end();
    this.report(null, false);
  }

  onError(err: Error): void {
    if (this.ended) return; // our own abort after the client left, or a late error
    if (this.paused) {
      this.failure ??= err; // reported when the recorder proceeds
      return;
    }
    this.finish();
    if (this.recording) {
      this.recorder!.end(this, classify(err));
      return;
    }
    if (this.started) this.res.destroy();
    this.report(classify(err), false);
  }

  get retained(): boolean {
    return this.chunks !== null;
  }

  body(): Buffer {
    const chunks = this.chunks;
    if (chunks === null || chunks.length === 0) return EMPTY;
    return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, this.size);
  }

  /** Relay mode: the status line goes to the client; false if the client had left. */
  private relayHead(): boolean {
    const res = this.res;
    if (res.destroyed) {
      this.clientLeft();
      return false;
    }
    this.started = true;
    res.writeHead(this.statusCode, this.headers!);
    res.once('close', () => {
      if (!this.ended) this.clientLeft();
    });
    return true;
  }

  private finish(): void {
    this.ended = true;
    const timer = this.timer;
    if (timer !== null) {
      this.timer = null;
      clearTimeout(timer);
    }
  }

  private report(error: UpstreamError | null, clientLeft: boolean): void {
    if (this.sink !== null) this.sink.end(this.opaque, error, clientLeft);
    else this.recorder!.end(this, error);
  }

  private clientLeft(): void {
    this.finish();
    const abort = this.abort;
    if (abort !== null) abort(new ClientGone());
    this.report(null, true);
  }
}

function dispatch<T>(upstream: Upstream, req: IncomingMessage, method: string, body: Buffer | IncomingMessage | null, handler: ExchangeHandler<T>, claim?: string): void {
  try {
    upstream.pool.dispatch(
      { origin: upstream.origin, path: req.url ?? '/', method: method as Dispatcher.HttpMethod, headers: forwardHeaders(req, body, claim), body },
      handler,
    );
  } catch (err) {
    handler.onError(err as Error);
  }
}

/** Forwards `req` (with `body`: the buffered body, the request stream itself, or none) and relays the answer into `res`. */
export function relayUpstream<T>(
  upstream: Upstream,
  req: IncomingMessage,
  method: string,
  body: Buffer | IncomingMessage | null,
  res: ServerResponse,
  sink: RelaySink<T>,
  opaque: T,
): void {
  dispatch(upstream, req, method, body, new ExchangeHandler(res, sink, opaque, null, 0, upstream.timeoutMs, 0));
}

/**
 * Forwards `req` with its buffered body and streams the answer into `res`
 * while recording it (body up to `limit` bytes); the recorder ends the
 * response. `claim`: the Idempotency-Claim token sent along (docs/co-commit.md).
 */
export function recordUpstream(
  upstream: Upstream,
  req: IncomingMessage,
  method: string,
  body: Buffer,
  res: ServerResponse,
  recorder: Recorder,
  limit: number,
  claim?: string,
): void {
  dispatch(upstream, req, method, body, new ExchangeHandler<null>(res, null, null, recorder, limit, upstream.timeoutMs, performance.now()), claim);
}
