import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { TenantSource } from '../config/types.js';
import type { StoredResponse } from '../store/records.js';
import { REFERENCE_RECORD_HEADER, reservedEntry } from './headers.js';
import { RelayHandler, type ClientLeft, type RelaySink } from './relay-handler.js';
import { classify, cutOff, droppedUnsent, noConnectionInTime, type Upstream, type UpstreamError } from './upstream.js';

// Reference records (`record: reference`, docs/storage.md, Record kinds): a
// 2xx answer with a Location on the upstream's own origin is stored as its
// status and headers, with the Location's path in a reserved last entry and
// no body; a replay GETs that path from the upstream and answers the original
// status with the current body. What the commit stores and what the replay
// fetches are here; src/lifecycle/reference.ts answers the replay.

const EMPTY = Buffer.alloc(0);

/** The three kinds of complete record (docs/storage.md): the body stored, too large to store, or fetched on replay. */
export type RecordKind = 'full' | 'marker' | 'reference';

/** The path (and query) a reference record GETs, or null: the record is not a reference. */
export function referenceOf(h: ReadonlyArray<readonly [string, string]>): string | null {
  return reservedEntry(h, REFERENCE_RECORD_HEADER);
}

/** A complete record's kind (null: no response stored yet). */
export function recordKind(bodyRetained: boolean | null, headers: ReadonlyArray<readonly [string, string]> | null): RecordKind | null {
  if (bodyRetained === null) return null;
  if (bodyRetained) return 'full';
  return headers !== null && referenceOf(headers) !== null ? 'reference' : 'marker';
}

/**
 * The path on the upstream that `location` names, resolved against the
 * request's URL on the upstream; null when it names another origin (never
 * followed: the proxy only ever asks its own upstream) or is not a URL.
 */
export function resolveReference(location: string, requestPath: string, origin: string): string | null {
  let url: URL;
  try {
    url = new URL(location, origin + requestPath);
  } catch {
    return null;
  }
  return url.origin === origin ? url.pathname + url.search : null;
}

/**
 * The record of `rec` on a `record: reference` route: a reference when the
 * answer is a success with a body to show (2xx other than 204 and 205) and a
 * Location on the upstream's origin; otherwise `rec` itself, stored in full
 * (errors, redirects, no Location, another origin).
 */
export function asReference(rec: StoredResponse, requestPath: string, origin: string): StoredResponse {
  const s = rec.status;
  if (s < 200 || s > 299 || s === 204 || s === 205) return rec;
  const location = rec.headers.find(([n]) => n === 'location');
  if (location === undefined) return rec;
  const ref = resolveReference(location[1], requestPath, origin);
  if (ref === null) return rec;
  return { status: s, headers: [...rec.headers, [REFERENCE_RECORD_HEADER, ref]], body: EMPTY, bodyRetained: false, bodySize: rec.bodySize };
}

const AUTHORIZATION_ONLY: readonly string[] = ['authorization'];

/** The request headers a reference GET carries as the client's credential: Authorization, and the header the route's tenant comes from. */
export function credentialHeaders(tenant: TenantSource): readonly string[] {
  const fromHeader = tenant.kind === 'fromHeader' || tenant.kind === 'fromHeaderHash';
  return fromHeader && tenant.header !== 'authorization' ? ['authorization', tenant.header] : AUTHORIZATION_ONLY;
}

/** How GET <reference> ended: its 2xx answer relayed (or cut, or the client left), another status (its body discarded), or no answer. */
export type Fetched =
  | { readonly kind: 'relayed' }
  | { readonly kind: 'client_left'; readonly unread: boolean }
  | { readonly kind: 'cut'; readonly error: UpstreamError }
  | { readonly kind: 'status'; readonly status: number }
  | { readonly kind: 'failed'; readonly error: UpstreamError };

/** The head of the replay for a 2xx GET answer: the replay's status and headers, from the GET's raw header lines. */
export type ReferenceHead = (current: readonly Buffer[]) => { readonly status: number; readonly headers: string[] };

function timedOut(h: ReferenceHandler): void {
  h.timer = null;
  h.timedOut();
}

/**
 * The GET's dispatch handler: a 2xx answer goes to the client through a
 * RelayHandler (straight into the response, with backpressure) under the
 * head `head` builds; any other status is read and dropped. upstream.timeout
 * bounds the wait for the answer's status line, the wait for a connection
 * included, with a timer of the proxy's own (as the record handler's); the
 * body, relayed, is bounded by undici's body timeout (each pause in it).
 */
class ReferenceHandler implements Dispatcher.DispatchHandler, RelaySink<null> {
  timer: NodeJS.Timeout | null;
  private relay: RelayHandler<null> | null = null;
  private abort: ((err?: Error) => void) | null = null;
  private status = 0;
  /** Answered (upstream.timeout ran out before a connection came): nothing more is reported. */
  private ended = false;

  constructor(
    private readonly res: ServerResponse, private readonly replayHead: ReferenceHead, private readonly done: (f: Fetched) => void,
    private readonly timeoutMs: number, private readonly sendTimeoutMs: number,
  ) {
    this.timer = setTimeout(timedOut, timeoutMs, this);
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
    if (this.ended) abort(droppedUnsent());
  }

  /** upstream.timeout ran out before the status line: the GET is cut off, or, not yet written, never will be. */
  timedOut(): void {
    if (cutOff(this.abort, this.timeoutMs)) return;
    this.ended = true;
    this.done({ kind: 'failed', error: noConnectionInTime(this.timeoutMs) });
  }

  private settled(): void {
    const timer = this.timer;
    if (timer !== null) {
      this.timer = null;
      clearTimeout(timer);
    }
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true;
    this.settled();
    if (statusCode > 299) {
      this.status = statusCode;
      return true;
    }
    const h = this.replayHead(rawHeaders);
    const relay = (this.relay = new RelayHandler(this.res, this, null, this.sendTimeoutMs));
    relay.onConnect(this.abort!);
    return relay.start(h.status, h.headers, resume);
  }

  onData(chunk: Buffer): boolean {
    return this.relay === null ? true : this.relay.onData(chunk);
  }

  onComplete(): void {
    if (this.relay !== null) this.relay.onComplete();
    else this.done({ kind: 'status', status: this.status });
  }

  onError(err: Error): void {
    if (this.ended) return; // our own abort of a GET answered already
    this.settled();
    if (this.relay !== null) this.relay.onError(err);
    else this.done({ kind: 'failed', error: classify(err) });
  }

  // RelaySink: the relayed answer ended.
  head(): void {}

  end(_: null, error: UpstreamError | null, clientLeft: ClientLeft): void {
    this.done(error !== null ? { kind: 'cut', error } : clientLeft ? { kind: 'client_left', unread: clientLeft === 'unread' } : { kind: 'relayed' });
  }
}

/**
 * GET `path` from the upstream with the duplicate's credential headers
 * (Authorization and the one its tenant came from: same tenant, same value), its Accept, and the
 * replay's request id; a 2xx answer is relayed into `res` under `head`.
 * upstream.timeout bounds it until the status line (ReferenceHandler), then
 * undici's body timeout each pause in the body.
 * Redirects are not followed.
 */
export function relayReference(
  upstream: Upstream, path: string, req: IncomingHttpHeaders, credentials: readonly string[], requestId: string,
  res: ServerResponse, head: ReferenceHead, sendTimeoutMs: number,
): Promise<Fetched> {
  const headers: string[] = ['x-request-id', requestId];
  for (const name of credentials) {
    const value = req[name];
    if (typeof value === 'string') headers.push(name, value);
  }
  const accept = req.accept;
  if (accept !== undefined) headers.push('accept', accept);
  return new Promise<Fetched>((resolve) => {
    const handler = new ReferenceHandler(res, head, resolve, upstream.timeoutMs, sendTimeoutMs);
    try {
      upstream.pool.dispatch({ origin: upstream.origin, path, method: 'GET', headers }, handler);
    } catch (err) {
      handler.onError(err as Error);
    }
  });
}
