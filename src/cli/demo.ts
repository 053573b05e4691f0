import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { CommandModule } from 'yargs';
import type { CliIo } from './io.js';
import type { Outcome } from './index.js';
import type { CommonArgs } from './options.js';

// `npm start`: a demo payments upstream and the proxy in front of it, on the
// embedded store. Nothing else needed.

const DEMO_YAML = `
listen: "\${LISTEN:-127.0.0.1:8080}"
admin: "\${ADMIN:-127.0.0.1:9090}"
upstream: { url: "\${UPSTREAM}" }
defaults:
  tenant: { fromHeader: x-tenant-id }
routes:
  - name: payments
    match: { methods: [POST], path: /v1/payments/** }
    required: true
  - name: everything-else
    match: { path: /** }
    mode: passthrough
`;

function demoUpstream(): http.Server {
  let n = 0;
  return http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c)).on('end', () => {
      const id = ++n;
      // A slow "payment": a duplicate sent meanwhile gets 409.
      setTimeout(() => {
        const body = JSON.stringify({ id: `pay_${id}`, executed: id, request: Buffer.concat(chunks).toString() || null, at: new Date().toISOString() });
        res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json' });
        res.end(body);
      }, req.method === 'POST' ? 1000 : 0);
    });
  });
}

export function demoCommand(io: CliIo, outcome: Outcome): CommandModule<CommonArgs, CommonArgs & { listen: string }> {
  return {
    command: 'demo',
    describe: 'Run a demo payments upstream with the proxy in front of it (embedded store)',
    builder: (y) => y.option('listen', { type: 'string', default: '127.0.0.1:8080', describe: 'proxy address' }),
    handler: async (args) => {
      const [{ startProxy }, { loadConfig }] = await Promise.all([import('../app.js'), import('../config/load.js')]);
      const upstream = demoUpstream();
      await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
      const port = (upstream.address() as AddressInfo).port;
      const config = loadConfig({
        text: DEMO_YAML,
        flags: { databaseUrl: args['database-url'] ?? null },
        env: { ...io.env, UPSTREAM: `http://127.0.0.1:${port}`, LISTEN: args.listen },
      });
      const proxy = await startProxy(config);
      io.stdout.write(`\nDemo: a payments API on http://127.0.0.1:${port} (each POST takes 1 s), the proxy on ${proxy.url}.\nTry, twice or at once:\n\n  curl -i -X POST ${proxy.url}/v1/payments -H 'Idempotency-Key: order-1' -H 'content-type: application/json' -d '{"amount":100}'\n\nThe second answer is the first one replayed (Idempotent-Replayed: true); during the first, 409.\n\n`);
      await new Promise<void>((resolve) => {
        io.onShutdownSignal(() => {
          void proxy.close().then(() => upstream.close(() => resolve()));
        });
      });
      outcome.code = 0;
    },
  };
}
