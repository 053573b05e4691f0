import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { assertProblem, captureLogger, requestLine, uniqueKey } from './support.js';
import { sleep, waitFor } from '../helpers/wait.js';

// The 500 path (docs/lifecycle.md, "any phase"): a fault no phase expects.
// It is made real, not mocked: a CHECK constraint added to the test's own
// database makes PostgreSQL refuse the claim (or the commit) of one path
// with an error that is not an outage. The client gets a 500 problem (or, once
// the answer has begun, a cut connection); the key is not bound (claim) or
// stays bounded by its lease with the heartbeat stopped (commit); the log line
// and the failures metric name the phase and the source; it is not counted
// as a store outage.

const LEASE_MS = 1500;
const yaml = `
defaults: { lease: ${LEASE_MS}ms }
routes:
  - name: pay
    match: { path: "/**" }
`;

describe('an unexpected fault inside a phase', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const { logger, lines } = captureLogger();
  before(async () => {
    db = await createTestDatabase();
    // /teapot answers 418, which the commit constraint below refuses.
    upstream = await startUpstream((req, _n, res) => {
      const status = req.url === '/teapot' ? 418 : 201;
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ok: true, path: req.url }));
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml, logger });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  const row = async (key: string): Promise<{ state: string; locked_until: Date } | undefined> =>
    (await sql<{ state: string; locked_until: Date }>(db.url, 'SELECT state, locked_until FROM idempotency_keys WHERE idem_key = $1', [key]))[0];
  const failures = async (phase: string, source: string): Promise<number> =>
    (await proxy.metrics.failures.get()).values.filter((v) => v.labels.phase === phase && v.labels.source === source).reduce((a, v) => a + v.value, 0);

  test('in the claim: 500 internal-error with no-store, nothing forwarded or bound, the log names the phase; the retry executes', async () => {
    await sql(db.url, "ALTER TABLE idempotency_keys ADD CONSTRAINT boom_claim CHECK (path <> '/boom')");
    const key = uniqueKey('boom');
    try {
      const r = await send(`${proxy.url}/boom`, { headers: { 'idempotency-key': key }, body: '{}' });
      assertProblem(r, 'internal-error', 500);
      assert.equal(r.headers['cache-control'], 'no-store');
      assert.equal(upstream.executions(), 0, 'nothing reached the upstream');
      assert.equal(await row(key), undefined, 'the key is not bound');
      const line = await requestLine(lines, '/boom');
      assert.equal(line.outcome, 'internal_error', 'a bug is not a store outage');
      assert.equal(line.phase, 'claim');
      assert.equal(line.source, 'internal');
      assert.equal(line.status, 500);
      assert.equal(await failures('claim', 'internal'), 1);
      const outages = (await proxy.metrics.requests.get()).values.filter((v) => v.labels.outcome === 'store_error');
      assert.equal(outages.length, 0, 'no store_error counted');
    } finally {
      await sql(db.url, 'ALTER TABLE idempotency_keys DROP CONSTRAINT boom_claim');
    }
    const retry = await send(`${proxy.url}/boom`, { headers: { 'idempotency-key': key }, body: '{}' });
    assert.equal(retry.status, 201);
    assert.equal(upstream.executions(), 1);
  });

  test('in the commit: the answer already under way is cut; the key stays claimed only until its lease (heartbeat stopped), then the retry runs', async () => {
    await sql(db.url, 'ALTER TABLE idempotency_keys ADD CONSTRAINT boom_commit CHECK (status_code IS DISTINCT FROM 418)');
    const key = uniqueKey('teapot');
    const before = upstream.executions();
    try {
      const r = await send(`${proxy.url}/teapot`, { headers: { 'idempotency-key': key }, body: '{}' }).catch((e: Error) => e);
      assert.ok(r instanceof Error, 'the client never sees a complete response whose record is not committed');
      assert.equal(upstream.executions(), before + 1);
      const line = await requestLine(lines, '/teapot');
      assert.equal(line.outcome, 'internal_error');
      assert.equal(line.phase, 'commit');
      assert.equal(line.source, 'internal');
      assert.equal(await failures('commit', 'internal'), 1);
      const held = await row(key);
      assert.equal(held?.state, 'in_flight');
      // The heartbeat (every lease/3) has stopped: the lease is not extended any more.
      await sleep(LEASE_MS * 0.7);
      assert.equal((await row(key))?.locked_until.getTime(), held!.locked_until.getTime(), 'no extension after the failure');
      assert.ok(held!.locked_until.getTime() - Date.now() < LEASE_MS, 'bounded by the lease');
    } finally {
      await sql(db.url, 'ALTER TABLE idempotency_keys DROP CONSTRAINT boom_commit');
    }
    const n = upstream.executions();
    const retry = await waitFor('the lease to end', async () => {
      const x = await send(`${proxy.url}/teapot`, { headers: { 'idempotency-key': key }, body: '{}' });
      return x.status === 409 ? undefined : x;
    }, LEASE_MS * 4, 200);
    assert.equal(retry.status, 418, 'the retry ran the operation after the lease (onExpiredLease: reexecute)');
    assert.equal(upstream.executions(), n + 1);
  });
});
