import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Handler } from '../lifecycle/handler.js';

// The listener. Timeouts bound slow-loris clients; keep-alive longer than a
// typical load balancer's idle timeout.

export interface Listener {
  readonly server: http.Server;
  readonly url: string;
  /** Stops accepting, lets in-flight requests finish, closes idle sockets. */
  close(deadlineMs: number): Promise<void>;
}

export async function listen(handler: Handler, host: string, port: number): Promise<Listener> {
  const server = http.createServer({
    keepAliveTimeout: 65_000,
    headersTimeout: 20_000,
    requestTimeout: 120_000,
    maxHeaderSize: 32 * 1024,
  }, handler);
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    if (!socket.writable || err.code === 'ECONNRESET') {
      socket.destroy();
      return;
    }
    const body = JSON.stringify({
      type: 'urn:idempotency-proxy:problem:bad-request',
      title: 'Malformed HTTP request',
      status: 400,
      detail: err.code ?? 'the request could not be parsed',
    });
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
    socket.end(`HTTP/1.1 ${status}\r\ncontent-type: application/problem+json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  });
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
