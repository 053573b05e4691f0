import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { forwardHeaders } from './forward.js';
import { clientResponseHeadersRaw } from './headers.js';
import { classify, type Upstream, type UpstreamError } from './upstream.js';

// The pass-through relay: one request to the upstream, its answer written
// straight into the client's response as it arrives. It is undici's dispatch
// handler itself, so nothing sits in between: no header object is built and
// walked again (the raw header lines go to writeHead), no async resource, no
// stream-finished helper with its half-dozen listeners, no promise. What it
// knows, it reports once to `end`: the exchange completed, the upstream failed
// (before or after the status line), or the client went away first.
//
// Bounded by undici's headers and body timeouts (upstream.timeout each).

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

class RelayHandler<T> implements Dispatcher.DispatchHandler {
  private abort: ((err?: Error) => void) | null = null;
  private resume: (() => void) | null = null;
  private started = false; // the status line went to the client
  private ended = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly sink: RelaySink<T>,
    private readonly opaque: T,
  ) {}

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true; // 1xx: the final answer follows
    if (this.ended) return false;
    const res = this.res;
    this.sink.head(this.opaque, statusCode);
    if (res.destroyed) {
      this.clientLeft();
      return false;
    }
    this.started = true;
    this.resume = resume;
    res.writeHead(statusCode, clientResponseHeadersRaw(rawHeaders));
    res.once('close', () => {
      if (!this.ended) this.clientLeft();
    });
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.ended) return false;
    if (this.res.write(chunk)) return true;
    // The client reads slower than the upstream sends: pause until it drains.
    this.res.once('drain', this.resume!);
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
  method: string,
  body: Buffer | IncomingMessage | null,
  res: ServerResponse,
  sink: RelaySink<T>,
  opaque: T,
): void {
  const handler = new RelayHandler(res, sink, opaque);
  try {
    upstream.pool.dispatch(
      { origin: upstream.origin, path: req.url ?? '/', method: method as Dispatcher.HttpMethod, headers: forwardHeaders(req, body), body },
      handler,
    );
  } catch (err) {
    handler.onError(err as Error);
  }
}
