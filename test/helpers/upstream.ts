import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { freePort } from '../../tools/local-servers.js';
import { sleep } from './wait.js';

// A real upstream for tests: counts executions, records what it received,
// and answers with whatever the test's responder says.

export interface Received {
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly rawHeaders: string[];
  readonly body: Buffer;
}

export type Responder = (req: Received, n: number, res: http.ServerResponse) => void | Promise<void>;

export interface TestUpstream {
  readonly url: string;
  readonly port: number;
  readonly received: Received[];
  /** Requests whose handler ran (body fully read). */
  executions(): number;
  close(): Promise<void>;
}

export const jsonResponder = (status = 201, delayMs = 0): Responder => async (req, n, res) => {
  if (delayMs > 0) await sleep(delayMs);
  const body = JSON.stringify({ execution: n, method: req.method, url: req.url, body: req.body.toString() });
  res.writeHead(status, { 'content-type': 'application/json', 'x-upstream-execution': String(n) });
  res.end(body);
};

export async function startUpstream(responder: Responder = jsonResponder()): Promise<TestUpstream> {
  const received: Received[] = [];
  const sockets = new Set<import('node:net').Socket>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const r: Received = { method: req.method!, url: req.url!, headers: req.headers, rawHeaders: req.rawHeaders, body: Buffer.concat(chunks) };
      received.push(r);
      Promise.resolve(responder(r, received.length, res)).catch(() => res.destroy());
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    received,
    executions: () => received.length,
    close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    }),
  };
}

/** A port with nothing listening on it (connection refused): one that was free a moment ago. */
export const closedPort = freePort;

/** What GET /download of startDownloadUpstream() sends, in bytes. */
export const DOWNLOAD_BYTES = 256;

/**
 * An upstream whose GET /download streams 16 chunks of 16 bytes, one every 100 ms (1.6 s, never idle long
 * enough for a body timeout), and that answers anything else with `other` (201 at once). Behind a proxy with
 * one upstream connection (oneConnectionYaml), a download holds it while other requests wait for it.
 */
export function startDownloadUpstream(other: Responder = jsonResponder(201)): Promise<TestUpstream> {
  return startUpstream(async (req, n, res) => {
    if (req.url !== '/download') return other(req, n, res);
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    for (let i = 0; i < DOWNLOAD_BYTES / 16; i++) {
      res.write(Buffer.alloc(16, i));
      await sleep(100);
    }
    res.end();
  });
}

/**
 * The proxy's config for startDownloadUpstream(): one upstream connection, `/orders/**` idempotent (with the
 * route settings in `orders`, e.g. `record: reference`), `/download` passed through.
 */
export const oneConnectionYaml = (timeout: string, orders = ''): string => [
  `upstream: { timeout: ${timeout}, connections: 1 }`,
  'defaults:',
  '  tenant: { constant: t }',
  'routes:',
  `  - { name: orders, match: { path: /orders/** }${orders === '' ? '' : `, ${orders}`} }`,
  '  - { name: files, match: { path: /download }, mode: passthrough }',
  '',
].join('\n');
