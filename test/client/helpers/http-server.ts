import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request as the test server saw it. */
export interface SeenRequest {
  index: number;
  method: string;
  path: string;
  /** The `Idempotency-Key` header (undefined when absent). */
  key: string | undefined;
  headers: IncomingMessage['headers'];
  body: string;
}

export type Handler = (seen: SeenRequest, res: ServerResponse, req: IncomingMessage) => void;

export interface TestServer {
  readonly url: string;
  readonly port: number;
  /** Every request received, in arrival order. */
  readonly seen: SeenRequest[];
  close(): Promise<void>;
}

/** A real HTTP server on 127.0.0.1:0 that records each request, then lets `handler` answer. */
export async function startServer(handler: Handler, port = 0): Promise<TestServer> {
  const seen: SeenRequest[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const key = req.headers['idempotency-key'];
      const entry: SeenRequest = {
        index: seen.length,
        method: req.method ?? '',
        path: req.url ?? '',
        key: Array.isArray(key) ? key[0] : key,
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      seen.push(entry);
      handler(entry, res, req);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const actual = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${actual}`,
    port: actual,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Answer with a status, optional headers and a JSON body. */
export function reply(res: ServerResponse, status: number, body: unknown = {}, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}
