// The co-commit example (docs/co-commit.md): an order service on the proxy's
// PostgreSQL database. It inserts the order and settles the proxy's record of
// the request in ONE transaction, so the record is complete exactly when the
// order exists — whatever happens to the proxy afterwards.
//
//   DATABASE_URL=postgres://… PORT=3000 node docs/examples/order-service.mjs
//   idempotency-proxy serve --upstream http://127.0.0.1:3000 --database-url postgres://…
import http from 'node:http';
import pg from 'pg';
import { settle } from 'idempotency-proxy/upstream';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
await pool.query('CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, idem_key text, amount integer NOT NULL)');

async function createOrder(req, res, body) {
  const { amount } = JSON.parse(body.toString() || '{}');
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query('INSERT INTO orders (idem_key, amount) VALUES ($1, $2) RETURNING id',
      [req.headers['idempotency-key'] ?? null, amount]);
    const response = { status: 201, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: `ord_${rows[0].id}`, amount }) };
    // The proxy's record, in this transaction: false = another attempt owns the key now.
    if ((await settle(client, req, response)) === false) {
      await client.query('ROLLBACK');
      res.writeHead(409, { 'content-type': 'application/json' }).end('{"error":"superseded by a retry"}');
      return;
    }
    await client.query('COMMIT');
    res.writeHead(response.status, response.headers).end(response.body);
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    client.release();
  }
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => createOrder(req, res, Buffer.concat(chunks)).catch((err) => res.writeHead(500).end(String(err))));
});
server.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', () => {
  console.log(JSON.stringify({ msg: 'order service listening', port: server.address().port }));
});
process.on('SIGTERM', () => server.close(() => pool.end()));
