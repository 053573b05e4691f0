// The benchmark's upstream: as little work per request as node:http allows.
// Answers 200 {"ok":true,"n":<counter>} to everything, reads and discards the
// request body, keeps connections alive. GET /__stats answers the counter
// without counting itself, so the harness can tell how many requests reached
// the upstream during a measurement (replays must not; a reference replay
// makes one GET). A POST under /bench/reference/ answers 201 with a Location.
//
//   node dist/bench/upstream.js --port 0   → prints {"port":N,"url":"http://127.0.0.1:N"}
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { isEntry, parseServerArgs } from './lib/cli-args.js';

export const STATS_PATH = '/__stats';
/** OTLP exports (the traced proxy's span sink): answered as a collector does, 200 with an empty response in the request's encoding. */
export const OTLP_TRACES_PATH = '/v1/traces';
/** POSTs under this path answer 201 with a Location (the `reference` route of bench/proxy.yaml). */
export const REFERENCE_PATH = '/bench/reference/';

export interface Upstream {
  readonly server: http.Server;
  count(): number;
}

export function createUpstream(): Upstream {
  let n = 0;
  const server = http.createServer((req, res) => {
    if (req.url === STATS_PATH) {
      const body = `{"n":${n}}`;
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    if (req.url === OTLP_TRACES_PATH) {
      const json = (req.headers['content-type'] ?? '').startsWith('application/json');
      req.on('end', () => {
        res.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf', 'content-length': json ? 2 : 0 });
        res.end(json ? '{}' : undefined);
      });
      req.resume();
      return;
    }
    n += 1;
    const body = `{"ok":true,"n":${n}}`;
    // record: reference (bench/proxy.yaml): a created resource, whose replays GET the Location.
    const created = req.method === 'POST' && req.url!.startsWith(REFERENCE_PATH);
    req.on('end', () => {
      if (created) {
        res.writeHead(201, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), location: `${REFERENCE_PATH}item` });
        res.end(body);
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
    req.resume();
  });
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 121_000;
  return { server, count: () => n };
}

async function main(): Promise<void> {
  const args = parseServerArgs(process.argv.slice(2));
  const { server } = createUpstream();
  await new Promise<void>((resolve) => server.listen(args.port, args.host, resolve));
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`${JSON.stringify({ port, url: `http://${args.host}:${port}` })}\n`);
  const stop = (): void => {
    server.close();
    server.closeAllConnections();
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (isEntry(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`upstream: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
