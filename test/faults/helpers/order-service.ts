import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { claimOf, settle } from '../../../src/upstream/index.js';

// An order service on the proxy's own database, run as a child process by
// the co-commit fault tests (order-service-process.ts starts it). POST
// /orders inserts an order and settles the proxy's record in the same
// transaction (idempotency-proxy/upstream). The test steers it through
// /_test/* (called directly, never through the proxy) and reads what it did
// from its stdout, one JSON event per line.

interface Mode {
  /** Call idempotency_settle in the business transaction. */
  settle: boolean;
  /** After the transaction: answer, or never answer (hold). 'raise-hold': raise after settling (rollback), then hold. */
  after: 'answer' | 'hold' | 'raise-hold';
  /** Wait for POST /_test/release (all, or {claim}) after the insert, before settling. */
  pauseBeforeSettle: boolean;
  /** Delay before answering, after the commit. */
  delayMs: number;
}

// Started only by order-service-process.ts: the test runner also loads every
// file under dist/test/, and this one is a server, not a test.
if (process.env.IDEM_ORDER_SERVICE === '1') await main();

async function main(): Promise<void> {
  let mode: Mode = { settle: true, after: 'answer', pauseBeforeSettle: false, delayMs: 0 };
  const paused: Array<{ claim: string | null; go: () => void }> = [];
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 60 });
  pool.on('error', () => {});
  const emit = (e: Record<string, unknown>): void => {
    process.stdout.write(`${JSON.stringify(e)}\n`);
  };

  class RaiseAfterSettle extends Error {}

  async function order(req: http.IncomingMessage, res: http.ServerResponse, body: Buffer): Promise<void> {
    const m = mode;
    const key = req.headers['idempotency-key'] as string | undefined;
    const claim = claimOf(req);
    emit({ event: 'received', key, claim });
    const amount = Number((JSON.parse(body.toString() || '{}') as { amount?: number }).amount ?? 0);
    const client = await pool.connect();
    let hold = false;
    try {
      await client.query('BEGIN');
      const { rows } = await client.query<{ id: string }>('INSERT INTO orders (idem_key, amount) VALUES ($1, $2) RETURNING id', [key ?? null, amount]);
      const out = JSON.stringify({ id: `ord_${rows[0]!.id}`, amount });
      const headers: http.OutgoingHttpHeaders = { 'content-type': 'application/json', 'x-order-id': `ord_${rows[0]!.id}`, 'x-tag': ['a', 'b'] };
      if (m.pauseBeforeSettle) {
        emit({ event: 'paused', key, claim });
        await new Promise<void>((go) => paused.push({ claim, go }));
      }
      if (m.settle) {
        const settled = await settle(client, req, { status: 201, headers, body: out });
        emit({ event: 'settle', key, claim, result: settled });
        if (settled === false) {
          await client.query('ROLLBACK');
          res.writeHead(409, { 'content-type': 'application/json' }).end('{"error":"fenced"}');
          return;
        }
      }
      if (m.after === 'raise-hold') throw new RaiseAfterSettle('raised after settling');
      await client.query('COMMIT');
      emit({ event: 'committed', key, claim, body: out });
      if (m.after === 'hold') {
        hold = true;
        return;
      }
      if (m.delayMs > 0) await new Promise((r) => setTimeout(r, m.delayMs));
      res.writeHead(201, { ...headers, 'content-length': String(Buffer.byteLength(out)) }).end(out);
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      if (err instanceof RaiseAfterSettle) {
        emit({ event: 'rolled-back', key, claim });
        hold = true;
        return;
      }
      emit({ event: 'error', key, message: (err as Error).message });
      res.writeHead(500).end((err as Error).message);
    } finally {
      client.release();
      // A held exchange ends only when the proxy's connection goes away.
      if (hold) res.on('close', () => emit({ event: 'closed', key }));
    }
  }

  async function control(req: http.IncomingMessage, res: http.ServerResponse, body: Buffer): Promise<void> {
    if (req.url === '/_test/mode') mode = { ...mode, ...(JSON.parse(body.toString()) as Partial<Mode>) };
    else if (req.url === '/_test/release') {
      // Every paused request, or the one of the claim named.
      const only = (JSON.parse(body.toString() || '{}') as { claim?: string }).claim;
      for (let i = paused.length - 1; i >= 0; i--) {
        if (only === undefined || paused[i]!.claim === only) paused.splice(i, 1)[0]!.go();
      }
    }
    res.writeHead(204).end();
  }

  await pool.query('CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, idem_key text, amount integer NOT NULL)');
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const run = req.url!.startsWith('/_test/') ? control(req, res, body) : order(req, res, body);
      run.catch((err: Error) => emit({ event: 'error', message: err.message }));
    });
  });
  server.listen(0, '127.0.0.1', () => emit({ event: 'listening', port: (server.address() as AddressInfo).port }));
  process.on('SIGTERM', () => {
    server.closeAllConnections();
    server.close();
    void pool.end().finally(() => process.exit(0));
  });
}
