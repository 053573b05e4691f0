import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
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
  /** Stops accepting, lets in-flight requests finish, closes idle sockets. */
  close(deadlineMs: number): Promise<void>;
}

export interface ServerTimeouts {
  /** Time a client has to send the request headers (slow-loris headers → 408). */
  readonly headersTimeoutMs: number;
  /** Time a client has to send the whole request, body included (slow-loris bodies → 408). */
  readonly requestTimeoutMs: number;
  readonly keepAliveTimeoutMs: number;
}

export const DEFAULT_SERVER_TIMEOUTS: ServerTimeouts = { headersTimeoutMs: 20_000, requestTimeoutMs: 120_000, keepAliveTimeoutMs: 65_000 };

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

export async function listen(handler: Handler, host: string, port: number, timeouts: Partial<ServerTimeouts> = {}): Promise<Listener> {
  const t = { ...DEFAULT_SERVER_TIMEOUTS, ...timeouts };
  const server = http.createServer({
    keepAliveTimeout: t.keepAliveTimeoutMs,
    headersTimeout: t.headersTimeoutMs,
    requestTimeout: t.requestTimeoutMs,
    // Node enforces both timeouts only when it checks its connections (every
    // 30 s by default): a slow-loris client would keep its socket up to 30 s
    // past them.
    connectionsCheckingInterval: Math.max(100, Math.min(1000, Math.floor(t.headersTimeoutMs / 4))),
    maxHeaderSize: 32 * 1024,
    // Host is checked with the rest of the framing (src/http/framing.ts), so
    // a missing Host gets a problem+json answer like every other 400.
    requireHostHeader: false,
  }, handler);
  server.on('connect', refuseConnect);
  server.on('clientError', refuseUnparsed);
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
    url: `http://${shownHost}:${addr.port}`,
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
