import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { UpstreamError } from '../errors.js';
import { dispatch } from './forward.js';
import { clientResponseHeadersRaw } from './headers.js';
import { classify, type Upstream } from './upstream.js';

// The relay handler: an undici dispatch handler that writes the upstream's
// answer straight into the client's response as it arrives. Nothing sits in
// between: the raw header lines go to writeHead, body chunks to res.write
// with backpressure from a slow client to the upstream; no body stream, no
// async iteration, no promise. A client that leaves aborts the exchange.
// Bounded by undici's headers and body timeouts (upstream.timeout each; the
// body timeout is an idle timeout). The record handler (record-handler.ts)
// hands the rest of an exchange to one of these after a release.

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

  constructor(private readonly res: ServerResponse, private readonly sink: RelaySink<T>, private readonly opaque: T) {}

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
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
    res.writeHead(statusCode, headers);
    this.started = true;
    res.once('close', () => {
      if (!this.ended) this.clientLeft();
    });
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.ended) return false;
    const res = this.res;
    if (res.write(chunk)) return true;
    // The client reads slower than the upstream sends: pause until it drains.
    res.once('drain', this.resume!);
    return false;
  }

  onComplete(): void {
    if (this.ended) return;
    this.ended = true;
    this.res.end();
    this.sink.end(this.opaque, null, false);
  }

  onError(err: Error): void {
    if (this.ended) return; // our own abort after the client left, or a late error
    this.ended = true;
    if (this.started) this.res.destroy();
    this.sink.end(this.opaque, classify(err), false);
  }

  private clientLeft(): void {
    this.ended = true;
    const abort = this.abort;
    if (abort !== null) abort(new ClientGone());
    this.sink.end(this.opaque, null, true);
  }
}

/** Forwards `req` (with `body`: the buffered body, the request stream itself, or none) and relays the answer into `res`. */
export function relayUpstream<T>(
  upstream: Upstream,
  req: IncomingMessage,
  body: Buffer | IncomingMessage | null,
  res: ServerResponse,
  sink: RelaySink<T>,
  opaque: T,
): void {
  dispatch(upstream, req, body, null, new RelayHandler(res, sink, opaque));
}
