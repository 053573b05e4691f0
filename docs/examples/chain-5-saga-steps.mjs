// Layer 5 — saga retry → step marker. A saga of three steps is retried from
// the start after a crash; each step's effect and its marker commit together,
// so the retry skips what was done and finishes the rest. docs/chain.md
import pg from 'pg';
import { step } from 'idempotency-proxy/upstream';
import { check, databaseUrl } from './lib/stack.mjs';

const pool = new pg.Pool({ connectionString: databaseUrl() });
await pool.query('CREATE TABLE IF NOT EXISTS saga_effects (saga text NOT NULL, step text NOT NULL)');
const saga = `checkout-${Date.now()}`;

async function doStep(name, crash = false) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    if (await step(client, `saga:${saga}`, name, '30 days')) {
      await client.query('INSERT INTO saga_effects VALUES ($1, $2)', [saga, name]);
    }
    if (crash) throw new Error(`crashed in ${name}`);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    client.release();
  }
}

async function runSaga(crashIn) {
  for (const name of ['reserve-stock', 'charge-card', 'ship']) await doStep(name, name === crashIn);
}

await runSaga('ship').catch(() => {}); // crashed in the last step: its effect rolled back
await runSaga(); // the orchestrator retries the saga from the start
await runSaga(); // and, not knowing it finished, once more
const { rows } = await pool.query('SELECT step, count(*)::int AS n FROM saga_effects WHERE saga = $1 GROUP BY 1 ORDER BY 1', [saga]);
check(rows.length === 3 && rows.every((r) => r.n === 1), 'every step took effect exactly once');
await pool.end();
