import http2 from 'node:http2';
import type http from 'node:http';
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { MAX_HEADER_BYTES } from './framing.js';
import type { ListenTimeouts } from '../config/types.js';
import type { Handler } from './server.js';

// HTTP/2 beside HTTP/1.1 on one port (docs/configuration.md, Listener). The
// HTTP/1.1 server owns the port; a connection that speaks HTTP/2 is handed to
// an HTTP/2 server that never listens: over TLS when ALPN chose h2, in clear
// text when its first bytes are the HTTP/2 connection preface (h2c with prior
// knowledge). Each stream is one request to the same handler, through Node's
// compatibility API, made to look like an HTTP/1.1 request first (adapt).

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

/**
 * Destroying a session with an error resets each of its open streams with INTERNAL_ERROR and says so in its
 * GOAWAY: a response cut by the shutdown deadline reads as broken, never as whole (src/http/respond.ts, cutResponse).
 * Without one, the streams go with the session's socket and Node's client ends them as if they were complete.
 */
const DEADLINE = 'the shutdown deadline passed with this stream still open';

/**
 * The header list a session advertises and nghttp2 enforces (a reset stream
 * beyond it): twice what the proxy accepts, so a list between the two
 * reaches the framing phase and gets its 431 problem (src/http/framing.ts).
 * Pairs: as many as fit in it at 32 bytes each, so the size decides, not the count.
 */
const H2_HEADER_LIST_BYTES = 2 * MAX_HEADER_BYTES;
const H2_HEADER_PAIRS = H2_HEADER_LIST_BYTES / 32;

export interface H2Front {
  /** The open sessions. */
  readonly sessions: ReadonlySet<http2.ServerHttp2Session>;
  /** Drain: GOAWAY on every session (and on every new one); open streams finish. */
  goAway(): void;
  /** Deadline passed: every session cut. */
  destroyAll(): void;
}

type Listener = (socket: Socket) => void;

/**
 * The request as the rest of the proxy reads an HTTP/1.1 one: no pseudo-header
 * lines (`:method`, `:path`, …), `:authority` as the Host line when the client
 * sent none, cookie lines joined (RFC 9113 §8.2.3); a body without
 * content-length (it ends with the stream) reads like a chunked one.
 */
function adapt(req: http2.Http2ServerRequest, res: http2.Http2ServerResponse): void {
  const raw = req.rawHeaders;
  const out: string[] = [];
  let host = false;
  let cookie: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.charCodeAt(0) === 0x3a /* : */) continue;
    if (name === 'cookie') {
      cookie = cookie === undefined ? raw[i + 1]! : `${cookie}; ${raw[i + 1]!}`;
      continue;
    }
    if (name === 'host') host = true;
    out.push(name, raw[i + 1]!);
  }
  if (cookie !== undefined) out.push('cookie', cookie);
  const headers = req.headers as Record<string, string | string[] | undefined>;
  const authority = headers[':authority'];
  if (!host && typeof authority === 'string') {
    out.unshift('host', authority);
    headers.host = authority;
  }
  if (headers['content-length'] === undefined && !req.stream.endAfterHeaders) headers['transfer-encoding'] = 'chunked';
  Object.defineProperty(req, 'rawHeaders', { value: out });
  if (!('destroyed' in (res as object))) Object.defineProperty(res, 'destroyed', { get: () => res.stream.destroyed });
}

function createH2Server(handler: Handler, t: ListenTimeouts): { server: http2.Http2Server; front: H2Front } {
  const sessions = new Set<http2.ServerHttp2Session>();
  let draining = false;
  const server = http2.createServer({
    settings: { maxConcurrentStreams: 256, maxHeaderListSize: H2_HEADER_LIST_BYTES },
    maxHeaderListPairs: H2_HEADER_PAIRS,
  }, (req, res) => {
    adapt(req, res);
    handler(req as unknown as http.IncomingMessage, res as unknown as http.ServerResponse);
  });
  // Idle sessions close like idle keep-alive connections.
  server.setTimeout(t.keepAliveTimeoutMs);
  server.on('session', (s) => {
    sessions.add(s);
    s.once('close', () => sessions.delete(s));
    s.on('error', () => s.destroy());
    if (draining) s.close();
  });
  const front: H2Front = {
    sessions,
    goAway: () => {
      draining = true;
      for (const s of sessions) s.close();
    },
    destroyAll: () => {
      for (const s of sessions) s.destroy(new Error(DEADLINE));
    },
  };
  return { server, front };
}

/** Takes the `event` listener the HTTP/1.1 server installed, so a connection can be routed first. */
function takeListener(server: http.Server, event: 'connection' | 'secureConnection'): Listener {
  const listeners = server.listeners(event) as Listener[];
  if (listeners.length !== 1) throw new Error(`unexpected ${event} listeners on the HTTP/1.1 server (${listeners.length})`);
  server.removeAllListeners(event);
  return (socket) => listeners[0]!.call(server, socket);
}

/** TLS: ALPN decided. */
export function attachH2OverTls(h1: http.Server, handler: Handler, t: ListenTimeouts): H2Front {
  const { server, front } = createH2Server(handler, t);
  const toH1 = takeListener(h1, 'secureConnection');
  h1.on('secureConnection', (socket: TLSSocket) => {
    if (socket.alpnProtocol === 'h2') server.emit('connection', socket);
    else toH1(socket);
  });
  return front;
}

/** Clear text: the connection preface decides (h2c with prior knowledge). */
export function attachH2c(h1: http.Server, handler: Handler, t: ListenTimeouts): H2Front {
  const { server, front } = createH2Server(handler, t);
  const toH1 = takeListener(h1, 'connection');
  h1.on('connection', (socket: Socket) => {
    let seen: Buffer | null = null;
    const done = (): void => {
      socket.off('data', onData).off('error', onError).setTimeout(0);
    };
    const onError = (): void => {
      done();
      socket.destroy();
    };
    const onData = (chunk: Buffer): void => {
      seen = seen === null ? chunk : Buffer.concat([seen, chunk]);
      const n = Math.min(seen.length, PREFACE.length);
      const h2 = seen.compare(PREFACE, 0, n, 0, n) === 0;
      if (h2 && n < PREFACE.length) return; // a prefix so far: wait for more
      done();
      socket.pause();
      socket.unshift(seen);
      if (h2) {
        server.emit('connection', socket);
      } else {
        toH1(socket);
        socket.resume();
      }
    };
    socket.on('data', onData).on('error', onError);
    // A client that connects and sends nothing is cut like a slow one.
    socket.setTimeout(t.headersTimeoutMs, onError);
  });
  return front;
}
