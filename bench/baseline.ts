// The bare pass-through baseline (bench/README.md, Method): node:http in front of one undici
// Pool with the proxy's pool settings, no idempotency. Forwards method, path,
// headers (minus hop-by-hop) and body; streams the response back. Whatever
// the proxy costs beyond this is the price of idempotency.
//
//   node dist/bench/baseline.js --upstream http://127.0.0.1:N --connections 128 --port 0
//   → prints {"port":N,"url":"http://127.0.0.1:N"}
import http from 'node:http';
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
    if (value === undefined || HOP_BY_HOP.has(name) || named.includes(name)) continue;
    out[name] = value;
  }
  return out;
}

export function createBaseline(upstream: string, connections: number): { server: http.Server; pool: Pool } {
  const pool = new Pool(upstream, { connections, keepAliveTimeout: 60_000, pipelining: 1 });
  const server = http.createServer((req, res) => {
    const headers = endToEnd(req.headers);
    headers['x-forwarded-for'] = req.socket.remoteAddress ?? '';
    headers['x-forwarded-proto'] = 'http';
    const hasBody = req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined;
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
  });
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 121_000;
  return { server, pool };
}

async function main(): Promise<void> {
  const args = parseServerArgs(process.argv.slice(2));
  if (args.upstream === null) throw new Error('--upstream URL is required');
  const { server, pool } = createBaseline(args.upstream, args.connections);
  await new Promise<void>((resolve) => server.listen(args.port, args.host, resolve));
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`${JSON.stringify({ port, url: `http://${args.host}:${port}` })}\n`);
  const stop = (): void => {
    server.close();
    server.closeAllConnections();
    void pool.close();
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
