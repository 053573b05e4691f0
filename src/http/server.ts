import { randomUUID } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { SecureContextOptions, TLSSocket } from 'node:tls';
import { LISTEN_TIMEOUT_DEFAULTS } from '../config/listen.js';
import type { ListenTimeouts } from '../config/types.js';
import { MAX_HEADER_BYTES } from './framing.js';
import { attachH2c, attachH2OverTls, type H2Front } from './h2.js';
import type { Duplex } from 'node:stream';
import { Problems } from './problems.js';
import { rawProblem } from './respond.js';

/** What the listener calls for every request that got past Node's HTTP parser. */
export type Handler = (req: http.IncomingMessage, res: http.ServerResponse) => void;

// The listener. Timeouts bound slow-loris clients; keep-alive longer than a
// typical load balancer's idle timeout.

export interface Listener {
  readonly server: http.Server;
  readonly url: string;
  /** The HTTP/2 sessions (listen.http2), null without HTTP/2. */
  readonly h2: H2Front | null;
  /** TLS only: new connections get this certificate and key; open ones keep theirs. */
  setSecureContext(tls: SecureContextOptions): void;
  /** Stops accepting, lets in-flight requests finish, closes idle sockets. */
  close(deadlineMs: number): Promise<void>;
}

/**
 * A reverse proxy is no tunnel: CONNECT gets a 405 and the connection closes
 * (without a listener Node would leave the socket open until a timeout).
 */
function refuseConnect(_req: http.IncomingMessage, socket: Duplex): void {
  socket.end(rawProblem(Problems.methodNotAllowed, 'CONNECT is not supported: this is a reverse proxy, not a tunnel', randomUUID()));
}

/**
 * Node's HTTP parser refused the request, or the client was too slow to send
 * it (headersTimeout / requestTimeout): a catalogue problem all the same,
 * written on the socket with a request id of its own (there is no response
 * object, and no phase has run).
 */
function refuseUnparsed(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (!socket.writable || err.code === 'ECONNRESET') {
    socket.destroy();
    return;
  }
  // A response already under way cannot be replaced by an error.
  if ((socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent) {
    socket.destroy();
    return;
  }
  const overflow = err.code === 'HPE_HEADER_OVERFLOW';
  const slow = err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
  const p = overflow ? Problems.headersTooLarge : slow ? Problems.requestTimeout : Problems.badRequest;
  const parserReason = (err as { reason?: string }).reason;
  const detail = overflow
    ? 'the request headers are larger than the proxy accepts'
    : slow
      ? 'the request (headers and body) was not received in time; the connection is closed'
      : `the HTTP request could not be parsed (${err.code ?? 'unknown parse error'}${parserReason ? `: ${parserReason}` : ''})`;
  socket.end(rawProblem(p, detail, randomUUID()));
}

/** TLS and HTTP/2 on the listener (docs/configuration.md, Listener). */
export interface ListenOptions {
  /** Certificate, key and (for mTLS) the client CA; null or absent: plain TCP. */
  readonly tls?: SecureContextOptions | null;
  readonly http2?: boolean;
  /** A TLS handshake failed (`tlsClientError`); it must close the socket. Absent: Node closes it, nothing is said. */
  readonly onTlsError?: (err: NodeJS.ErrnoException, socket: TLSSocket) => void;
}

function createServer(handler: Handler, t: ListenTimeouts, tls: SecureContextOptions | null | undefined, h2: boolean): http.Server {
  const options: http.ServerOptions = {
    keepAliveTimeout: t.keepAliveTimeoutMs,
    headersTimeout: t.headersTimeoutMs,
    requestTimeout: t.requestTimeoutMs,
    // Node enforces both timeouts only when it checks its connections (every
    // 30 s by default): a slow-loris client would keep its socket up to 30 s
    // past them.
    connectionsCheckingInterval: Math.max(100, Math.min(1000, Math.floor(t.headersTimeoutMs / 4))),
    maxHeaderSize: MAX_HEADER_BYTES,
    // Host is checked with the rest of the framing (src/http/framing.ts), so
    // a missing Host gets a problem+json answer like every other 400.
    requireHostHeader: false,
  };
  if (tls === null || tls === undefined) return http.createServer(options, handler);
  // A client CA means mTLS: a client without a certificate it signed is refused in the handshake.
  const mtls = tls.ca !== undefined;
  return https.createServer({
    ...options,
    ...tls,
    requestCert: mtls,
    rejectUnauthorized: mtls,
    ALPNProtocols: h2 ? ['h2', 'http/1.1'] : ['http/1.1'],
  }, handler) as unknown as http.Server;
}

export async function listen(handler: Handler, host: string, port: number, timeouts: Partial<ListenTimeouts> = {}, opts: ListenOptions = {}): Promise<Listener> {
  const t = { ...LISTEN_TIMEOUT_DEFAULTS, ...timeouts };
  const tls = opts.tls ?? null;
  const server = createServer(handler, t, tls, opts.http2 === true);
  const h2 = opts.http2 !== true ? null : tls !== null ? attachH2OverTls(server, handler, t) : attachH2c(server, handler, t);
  server.on('connect', refuseConnect);
  server.on('clientError', refuseUnparsed);
  if (tls !== null && opts.onTlsError !== undefined) server.on('tlsClientError', opts.onTlsError);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const shownHost = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    server,
    url: `${tls !== null ? 'https' : 'http'}://${shownHost}:${addr.port}`,
    h2,
    setSecureContext: (next) => {
      if (tls === null) throw new Error('the listener has no TLS');
      (server as unknown as https.Server).setSecureContext(next);
    },
    close: (deadlineMs) => closeGracefully(server, deadlineMs),
  };
}

export function closeGracefully(server: http.Server, deadlineMs: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      server.closeAllConnections();
    }, deadlineMs);
    timer.unref();
    server.close(() => {
      clearTimeout(timer);
      resolve();
    });
    server.closeIdleConnections();
  });
}
