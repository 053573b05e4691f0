// The bare pass-through baseline (bench/README.md, Method): node:http in front of one undici
// Pool with the proxy's pool settings, no idempotency. Forwards method, path,
// headers (minus hop-by-hop) and body; streams the response back. Whatever
// the proxy costs beyond this is the price of idempotency.
//
//   node dist/bench/baseline.js --upstream http://127.0.0.1:N --connections 128 --port 0
//   → prints {"port":N,"url":"http://127.0.0.1:N"}
//
// With --tls-cert/--tls-key it terminates TLS (node:https), with --http2 as
// well it speaks HTTP/2 over TLS (node:http2, ALPN h2): the baselines of the
// TLS and HTTP/2 rows, the same forwarding behind each.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Writable } from 'node:stream';
import { Pool } from 'undici';
import { isEntry, parseServerArgs } from './lib/cli-args.js';

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'expect',
]);

type HeaderBag = Record<string, string | string[]>;

function endToEnd(headers: Readonly<Record<string, string | string[] | undefined>>): HeaderBag {
  const connection = headers['connection'];
  const named = typeof connection === 'string' ? connection.toLowerCase().split(',').map((s) => s.trim()) : [];
  const out: HeaderBag = {};
  for (const name in headers) {
    const value = headers[name];
    // HTTP/2 pseudo-headers (:method, :path, :authority…) are not forwarded (undici sets Host from the origin).
    if (value === undefined || HOP_BY_HOP.has(name) || named.includes(name) || name.charCodeAt(0) === 0x3a) continue;
    out[name] = value;
  }
  return out;
}

export interface BaselineOptions {
  readonly tls: { readonly cert: Buffer; readonly key: Buffer } | null;
  readonly http2: boolean;
}

type Server = http.Server | https.Server | http2.Http2SecureServer;

export function createBaseline(upstream: string, connections: number, opts: BaselineOptions = { tls: null, http2: false }): { server: Server; pool: Pool } {
  const pool = new Pool(upstream, { connections, keepAliveTimeout: 60_000, pipelining: 1 });
  const proto = opts.tls === null ? 'http' : 'https';
  const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const headers = endToEnd(req.headers);
    headers['x-forwarded-for'] = req.socket.remoteAddress ?? '';
    headers['x-forwarded-proto'] = proto;
    // An HTTP/2 body need not announce its length: it ends with the stream.
    const h2 = (req as unknown as http2.Http2ServerRequest).stream;
    const hasBody = req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined || (h2 !== undefined && !h2.endAfterHeaders);
    pool
      .stream(
        { method: req.method as 'POST', path: req.url ?? '/', headers, body: hasBody ? req : null },
        ({ statusCode, headers: upstreamHeaders }): Writable => {
          res.writeHead(statusCode, endToEnd(upstreamHeaders));
          return res;
        },
      )
      .catch(() => {
        if (!res.headersSent) {
          res.writeHead(502, { 'content-type': 'text/plain', 'content-length': 11 });
          res.end('bad gateway');
        } else {
          res.destroy();
        }
      });
  };
  if (opts.tls !== null && opts.http2) {
    // Settings as the proxy's HTTP/2 listener (src/http/h2.ts).
    const server = http2.createSecureServer({ ...opts.tls, settings: { maxConcurrentStreams: 256 } }, handler as unknown as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void);
    server.setTimeout(120_000);
    return { server, pool };
  }
  const server = opts.tls === null ? http.createServer(handler) : https.createServer({ ...opts.tls }, handler);
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 121_000;
  return { server, pool };
}

async function main(): Promise<void> {
  const args = parseServerArgs(process.argv.slice(2));
  if (args.upstream === null) throw new Error('--upstream URL is required');
  const tls = args.tls === null ? null : { cert: readFileSync(args.tls.cert), key: readFileSync(args.tls.key) };
  const { server, pool } = createBaseline(args.upstream, args.connections, { tls, http2: args.http2 });
  await new Promise<void>((resolve) => server.listen(args.port, args.host, resolve));
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`${JSON.stringify({ port, url: `${tls === null ? 'http' : 'https'}://${args.host}:${port}` })}\n`);
  const stop = (): void => {
    server.close();
    if ('closeAllConnections' in server) server.closeAllConnections();
    void pool.close();
    if (args.http2) setTimeout(() => process.exit(0), 500).unref(); // open HTTP/2 sessions do not end by themselves
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (isEntry(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`baseline: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
