// Layer 4 — worker retry → job uniqueness. Enqueueing is unique by the job's
// key (the queue's own job key: graphile-worker job_key, pg-boss
// singletonKey; here a UNIQUE column), so a double enqueue makes one job.
// The job's effect is marked with idempotency_step in the job's transaction,
// so a worker that retries a job whose first run committed (a timeout after
// the work was done) does not do it again. docs/chain.md
import pg from 'pg';
import { step } from 'idempotency-proxy/upstream';
import { check, databaseUrl } from './lib/stack.mjs';

const pool = new pg.Pool({ connectionString: databaseUrl() });
await pool.query('CREATE TABLE IF NOT EXISTS receipt_jobs (job_key text PRIMARY KEY, order_id text NOT NULL)');
await pool.query('CREATE TABLE IF NOT EXISTS receipts_sent (order_id text NOT NULL)');
const order = `ord-${Date.now()}`;
const jobKey = `send-receipt:${order}`;

const enqueue = () => pool.query('INSERT INTO receipt_jobs VALUES ($1, $2) ON CONFLICT (job_key) DO NOTHING', [jobKey, order]);
await enqueue();
await enqueue(); // the order service retried its enqueue
const { rows: jobs } = await pool.query('SELECT * FROM receipt_jobs WHERE job_key = $1', [jobKey]);
check(jobs.length === 1, 'one job for two enqueues');

async function runJob(job) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    if (await step(client, 'receipt-jobs', job.job_key, '30 days')) {
      await client.query('INSERT INTO receipts_sent VALUES ($1)', [job.order_id]); // the outbox row for the e-mail
    }
    await client.query('COMMIT');
  } finally {
    client.release();
  }
}
await runJob(jobs[0]);
await runJob(jobs[0]); // the queue thought the first run timed out and ran it again
const { rows } = await pool.query('SELECT count(*)::int AS n FROM receipts_sent WHERE order_id = $1', [order]);
check(rows[0].n === 1, 'the receipt went out once');
await pool.end();
