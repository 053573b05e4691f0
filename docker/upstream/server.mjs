// A demo payments API for docker-compose.yml: deliberately NOT idempotent.
// Every POST creates a new payment with a new id, after a delay, so that
// duplicates are visible: run `idempotency-proxy verify` against it directly
// (several executions) and through the proxy (exactly one).
//
//   POST /v1/payments      → 201 {"id":"pay_…","amount":…,"execution":n}
//   GET  /v1/payments      → 200 {"executions":n}
//   GET  /healthz          → 200 {"status":"ok"}
//
// Environment: PORT (default 3000, 0 = any free port), HOST (default 0.0.0.0),
// DELAY_MS (default 500). No dependencies.
import http from 'node:http';
import { randomBytes } from 'node:crypto';

const port = Number(process.env.PORT ?? 3000);
const host = process.env.HOST ?? '0.0.0.0';
const delayMs = Number(process.env.DELAY_MS ?? 500);
let executions = 0;

function json(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/healthz') return json(res, 200, { status: 'ok' });
    if (path === '/v1/payments' && req.method === 'GET') return json(res, 200, { executions });
    if (path.startsWith('/v1/payments') && req.method === 'POST') {
      const n = ++executions;
      let amount = null;
      try {
        amount = JSON.parse(Buffer.concat(chunks).toString() || 'null')?.amount ?? null;
      } catch {
        return json(res, 400, { error: 'body must be JSON' });
      }
      setTimeout(() => {
        json(res, 201, {
          id: `pay_${n}_${randomBytes(6).toString('hex')}`,
          amount,
          execution: n,
          idempotencyKey: req.headers['idempotency-key'] ?? null,
          createdAt: new Date().toISOString(),
        });
      }, delayMs);
      return;
    }
    json(res, 404, { error: `no route for ${req.method} ${path}` });
  });
});

server.listen(port, host, () => {
  const a = server.address();
  console.log(JSON.stringify({ msg: 'demo upstream listening', url: `http://${a.address}:${a.port}`, delayMs }));
});
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => server.close(() => process.exit(0)));
}
