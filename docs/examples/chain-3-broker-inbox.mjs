// Layer 3 — broker redelivery → inbox. A broker delivers at least once; the
// consumer marks each message id in its own transaction with
// idempotency_step, and does the work only the first time. A consumer that
// fails before COMMIT leaves no marker: the redelivery does the work.
// Needs DATABASE_URL on a database the proxy migrated. docs/chain.md
import pg from 'pg';
import { step } from 'idempotency-proxy/upstream';
import { check, databaseUrl } from './lib/stack.mjs';

const pool = new pg.Pool({ connectionString: databaseUrl() });
await pool.query('CREATE TABLE IF NOT EXISTS inbox_effects (message_id text NOT NULL, amount integer NOT NULL)');
const run = `inbox-${Date.now()}`;

async function consume(message, { crashBeforeCommit = false } = {}) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    if (await step(client, 'inbox', message.id, '7 days')) {
      await client.query('INSERT INTO inbox_effects VALUES ($1, $2)', [message.id, message.amount]);
    }
    if (crashBeforeCommit) throw new Error('consumer crashed');
    await client.query('COMMIT'); // then ack the message
  } catch (err) {
    await client.query('ROLLBACK');
    if (!crashBeforeCommit) throw err;
  } finally {
    client.release();
  }
}

const a = { id: `${run}-a`, amount: 10 };
const b = { id: `${run}-b`, amount: 20 };
await consume(a);
await consume(a); // redelivered: the ack was lost
await Promise.all([consume(a), consume(a)]); // two consumers got it at once
await consume(b, { crashBeforeCommit: true });
await consume(b); // the redelivery after the crash
const { rows } = await pool.query('SELECT message_id, count(*)::int AS n FROM inbox_effects WHERE message_id LIKE $1 GROUP BY 1 ORDER BY 1', [`${run}-%`]);
check(rows.length === 2 && rows.every((r) => r.n === 1), 'each message took effect exactly once');
await pool.end();
