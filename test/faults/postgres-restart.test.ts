import assert from 'node:assert/strict';
import pg from 'pg';
import { after, before, describe, test } from 'node:test';
import type { RunningProxy } from '../../src/app.js';
import { send } from '../helpers/http.js';
import { streamed } from './helpers/client.js';
import { answer, hold, startControlledUpstream, type ControlledUpstream } from './helpers/controlled-upstream.js';
import { claimStatement } from '../../src/store/sql/claim.js';
import { commitOneStatement } from '../../src/store/sql/commit.js';
import { startPgRelay, type PgRelay } from './helpers/pg-relay.js';
import { PROBLEM_BASE } from '../../src/http/problems.js';
import { startThrowawayPostgres, type ThrowawayPostgres } from '../helpers/servers.js';
import { sql } from '../helpers/db.js';
import { metric, metricsText } from '../helpers/metrics.js';
import { type LogLine, startLoggedProxy, startTestProxy } from '../helpers/proxy.js';
import { sleep, waitFor } from '../helpers/wait.js';

// PostgreSQL stopped hard (pg_ctl stop -m immediate) and started again under
// steady traffic, on a throwaway cluster of this test's own. During the
// outage the proxy fails closed with 503 + Retry-After, quickly (no 500, no
// hang); afterwards it recovers by itself, every key a client saw a 2xx for
// has a committed record, and no key ran twice.

const YAML = `
upstream: { timeout: 10s }
store: { poolSize: 4 }
defaults:
  lease: 2s
  tenant: { fromHeader: x-tenant }
routes:
  - name: orders
    match: { path: "/orders/**" }
  - name: strict
    match: { path: "/strict/**" }
    onExpiredLease: fail
  - name: waiting
    match: { path: "/waiting/**" }
    onExpiredLease: fail
    onInFlight: wait
    lease: 10s
    waitTimeout: 8s
`;
const WORKERS = 6;
const BEFORE_MS = 1000;
const OUTAGE_MS = 2000;
const AFTER_MS = 1500;
/** Longest single exchange tolerated: a commit retried across the outage, with slack. */
const MAX_EXCHANGE_MS = 6000;

interface Attempt { status: number | 'network'; ms: number; retryAfter?: string; type?: string; at: number }
interface KeyLog { key: string; tenant: string; attempts: Attempt[]; ok: boolean }

describe('PostgreSQL restarted under load', () => {
  let pgc: ThrowawayPostgres;
  let up: ControlledUpstream;
  let proxy: RunningProxy;

  before(async () => {
    pgc = await startThrowawayPostgres();
    up = await startControlledUpstream(answer(201, 2));
    proxy = await startTestProxy({ upstream: up.url, databaseUrl: pgc.url, yaml: YAML });
  });

  after(async () => {
    await proxy?.close();
    await up?.close();
    await pgc?.destroy();
  });

  /** A proxy of its own, logged, whose store is reached through a relay that can lose a reply (helpers/pg-relay.ts). */
  async function startRelayedProxy(): Promise<{ relay: PgRelay; proxy: RunningProxy; lines: LogLine[] }> {
    const relay = await startPgRelay(pgc.port);
    const started = await startLoggedProxy({ upstream: up.url, databaseUrl: `postgres://postgres@127.0.0.1:${relay.port}/postgres`, yaml: YAML }).catch(async (e: unknown) => {
      await relay.close();
      throw e;
    });
    return { relay, ...started };
  }

  test('503 + Retry-After during the outage, automatic recovery, every 2xx committed, nothing executed twice', async (t) => {
    const logs: KeyLog[] = [];
    let generating = true;
    const t0 = Date.now();
    const worker = async (w: number): Promise<void> => {
      for (let i = 0; generating; i++) {
        const log: KeyLog = { key: `pg-${w}-${i}`, tenant: `tenant-${w % 2}`, attempts: [], ok: false };
        logs.push(log);
        const opts = { headers: { 'idempotency-key': log.key, 'x-tenant': log.tenant, 'content-type': 'application/json' }, body: `{"w":${w},"i":${i}}` };
        // A well-behaved client: retry the same key until it gets an answer bound to it.
        while (Date.now() - t0 < BEFORE_MS + OUTAGE_MS + AFTER_MS + 15_000) {
          const a0 = Date.now();
          try {
            const r = await send(`${proxy.url}/orders/1`, opts);
            const att: Attempt = { status: r.status, ms: Date.now() - a0, at: a0 - t0 };
            if (r.status !== 201) {
              att.type = r.json().type;
              if (r.headers['retry-after'] !== undefined) att.retryAfter = String(r.headers['retry-after']);
            }
            log.attempts.push(att);
            if (r.status === 201) {
              log.ok = true;
              break;
            }
            if (r.status !== 503 && r.status !== 409) break; // unexpected: reported below
          } catch {
            log.attempts.push({ status: 'network', ms: Date.now() - a0, at: a0 - t0 });
          }
          await sleep(100);
        }
      }
    };
    const workers = Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));

    await sleep(BEFORE_MS);
    await pgc.stop('immediate');
    const downAt = Date.now() - t0;
    // Requests caught in their commit wait the outage out (the commit is
    // retried); with batching the workers move in step, so all of them may
    // be. A client that arrives now must get its 503 at once.
    const arriving = worker(WORKERS);
    const readyDuring = (await fetch(`${proxy.adminUrl}/readyz`)).status;
    await sleep(OUTAGE_MS - (Date.now() - t0 - downAt));
    await pgc.start();
    const upAt = Date.now() - t0;
    await sleep(AFTER_MS);
    generating = false;
    await Promise.all([workers, arriving]);

    const attempts = logs.flatMap((l) => l.attempts);
    const byStatus = new Map<string, number>();
    for (const a of attempts) byStatus.set(String(a.status), (byStatus.get(String(a.status)) ?? 0) + 1);
    const summary = `outage ${downAt}–${upAt} ms; ${logs.length} keys; attempts by status ${JSON.stringify(Object.fromEntries(byStatus))}`;

    t.diagnostic(`${summary}; slowest exchange ${Math.max(...attempts.map((a) => a.ms))} ms`);
    const unexpected = attempts.filter((a) => a.status !== 201 && a.status !== 503 && a.status !== 409 && a.status !== 'network');
    assert.deepEqual(unexpected, [], `no 500 or other surprise (${summary})`);
    const unavailable = attempts.filter((a) => a.status === 503);
    assert.ok(unavailable.length > 0, `the outage must have been seen as 503 (${summary})`);
    for (const a of unavailable) {
      assert.equal(a.type, `${PROBLEM_BASE}store-unavailable`);
      assert.ok(Number(a.retryAfter) >= 1, '503 carries Retry-After');
    }
    const slowest = Math.max(...attempts.map((a) => a.ms));
    assert.ok(slowest < MAX_EXCHANGE_MS, `an exchange took ${slowest} ms (${summary})`);
    const lost = logs.filter((l) => !l.ok);
    assert.deepEqual(lost.map((l) => l.key), [], `every key ends with its answer (${summary})`);

    assert.equal(readyDuring, 503, '/readyz says not ready while the store is down');
    // Automatic recovery: ready again, new keys work.
    const ready = await waitFor('/readyz 200', async () => (await fetch(`${proxy.adminUrl}/readyz`)).status === 200, 5000);
    assert.ok(ready);
    const fresh = await send(`${proxy.url}/orders/1`, { headers: { 'idempotency-key': 'pg-after', 'x-tenant': 'tenant-0' }, body: '{}' });
    assert.equal(fresh.status, 201);

    // Every key with a 2xx is committed; no key ran twice.
    const rows = await sql<{ tenant_id: string; idem_key: string; state: string }>(pgc.url,
      `SELECT tenant_id, idem_key, state FROM idempotency_keys WHERE idem_key LIKE 'pg-%'`);
    const state = new Map(rows.map((r) => [`${r.tenant_id}/${r.idem_key}`, r.state]));
    const notCommitted = logs.filter((l) => l.ok && state.get(`${l.tenant}/${l.key}`) !== 'complete').map((l) => l.key);
    assert.deepEqual(notCommitted, [], 'a 2xx without a committed record');
    const twice = logs.filter((l) => up.executions(l.key) > 1).map((l) => `${l.key}×${up.executions(l.key)}`);
    assert.deepEqual(twice, [], 'executed more than once');
    const never = logs.filter((l) => l.ok && up.executions(l.key) !== 1).map((l) => l.key);
    assert.deepEqual(never, []);
  });

  test('an upstream answer that arrives during an outage longer than a few seconds is committed once the store is back', async () => {
    const k = 'pg-long-outage';
    up.behave(hold);
    const s = streamed(`${proxy.url}/orders/1`, { headers: { 'idempotency-key': k, 'x-tenant': 'tenant-0' }, body: '{"long":1}' });
    const ex = await up.arrival((e) => e.key === k);
    await pgc.stop('immediate');
    ex.respond(201, '{"done":true}');
    await sleep(4500); // longer than any fixed handful of commit retries
    await pgc.start();
    const first = await s;
    assert.ok(!(first instanceof Error), 'the client is still waiting for its answer');
    assert.equal(first.status, 201);
    assert.equal(await first.end, 'complete', 'the commit must outlast the outage rather than drop the record');
    assert.equal(first.received(), '{"done":true}');
    const [r] = await sql<{ state: string }>(pgc.url, 'SELECT state FROM idempotency_keys WHERE idem_key = $1', [k]);
    assert.equal(r?.state, 'complete');
    up.behave(answer());
    const replay = await send(`${proxy.url}/orders/1`, { headers: { 'idempotency-key': k, 'x-tenant': 'tenant-0' }, body: '{"long":1}' });
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.equal(up.executions(k), 1);
  });

  // A key to release (here the upstream refused with 429, a releaseOn status) while the store is down: the
  // release is retried in the background once the client has its answer. Left claimed, the key's lease would
  // end with nobody to release it, and on this onExpiredLease: fail route the retry would find it
  // outcome_unknown (409) until an operator resolved it, though the operation never ran.
  test('a release the store could not take is retried until the store is back: the retry runs, no key is left for an operator', async () => {
    const k = 'pg-release-later';
    const headers = { 'idempotency-key': k, 'x-tenant': 'tenant-0' };
    up.behave(hold);
    const s = send(`${proxy.url}/strict/1`, { headers, body: '{"r":1}' });
    const ex = await up.arrival((e) => e.key === k);
    await pgc.stop('immediate');
    try {
      ex.respond(429, '{"error":"slow down"}');
      const first = await s;
      assert.equal(first.status, 429, 'the upstream\'s refusal, relayed unrecorded');
      // This key, and perhaps claims the outages of the tests before left to look for again.
      assert.ok(metric(await metricsText(proxy.adminUrl), 'idempotency_proxy_keys_to_give_back') >= 1, 'the key waits to be given back');
      await sleep(3000); // the store still down past the key's 2 s lease
    } finally {
      await pgc.start(); // whatever failed: the tests after this one need the store
    }
    await waitFor('the key to be released once the store is back', async () =>
      (await sql(pgc.url, 'SELECT 1 FROM idempotency_keys WHERE idem_key = $1', [k])).length === 0, 10_000);
    up.behave(answer());
    const retry = await send(`${proxy.url}/strict/1`, { headers, body: '{"r":1}' });
    assert.equal(retry.status, 201);
    assert.equal(retry.headers['idempotent-replayed'], undefined);
  });

  // The claim statement reaches the server and commits, and its reply is lost: the request gets 503 and runs
  // nothing, yet the key is claimed in its name. Given back at once, the retry runs; left, every retry would
  // get 409 until the lease ended, and on this onExpiredLease: fail route then 409 outcome-unknown for good.
  test('a claim that took effect but whose reply was lost is given back: the retry runs at once, nothing is left for an operator', async () => {
    const { relay, proxy: p, lines } = await startRelayedProxy();
    try {
      up.behave(answer());
      const headers = { 'idempotency-key': 'pg-lost-claim', 'x-tenant': 'tenant-0' };
      const lost = relay.loseNextReply(claimStatement.name);
      const first = await send(`${p.url}/strict/1`, { headers, body: '{"c":1}' });
      await lost;
      assert.equal(first.status, 503);
      assert.equal(first.json().type, `${PROBLEM_BASE}store-unavailable`);
      const given = await waitFor('the lost claim to be given back', () =>
        lines.find((l) => l.msg === 'a claim whose reply was lost was given back once the store answered'), 5000);
      assert.equal(given.result, 'released', 'the claim had taken effect: the key was deleted');
      const retry = await send(`${p.url}/strict/1`, { headers, body: '{"c":1}' });
      assert.equal(retry.status, 201, 'the retry runs at once, not after the 2 s lease');
      assert.equal(up.executions('pg-lost-claim'), 1);
    } finally {
      await p.close();
      await relay.close();
    }
  });

  // A duplicate waiting on an onInFlight: wait route claims again once the first request releases the key (here
  // the upstream refused with 429), and that claim takes effect but its reply is lost. The waiter answers 409,
  // the last answer it had, and runs nothing; the key, claimed in its name, is given back as a first claim's
  // would be. Left, every retry would get 409 for the 10 s lease, then outcome-unknown until an operator
  // resolved it.
  test('a waiter\'s claim again that took effect but whose reply was lost is given back: the retry runs at once', async () => {
    const { relay, proxy: p, lines } = await startRelayedProxy();
    try {
      const k = 'pg-lost-reclaim';
      const headers = { 'idempotency-key': k, 'x-tenant': 'tenant-0' };
      up.behave(hold);
      const first = send(`${p.url}/waiting/1`, { headers, body: '{"w":1}' });
      const ex = await up.arrival((e) => e.key === k);
      const waiter = send(`${p.url}/waiting/1`, { headers, body: '{"w":1}' });
      // Both claims sent (the first's and the duplicate's, which finds the key in flight and waits); the next
      // claim is the duplicate's claim again.
      await waitFor('the duplicate\'s claim', () => relay.sent(claimStatement.name) >= 2, 5000);
      await sleep(100);
      const lost = relay.loseNextReply(claimStatement.name);
      ex.respond(429, '{"error":"slow down"}');
      assert.equal((await first).status, 429, 'the upstream\'s refusal, relayed unrecorded: the key is released');
      await lost;
      const w = await waiter;
      assert.equal(w.status, 409, 'the waiter keeps its last answer');
      const given = await waitFor('the waiter\'s lost claim to be given back', () =>
        lines.find((l) => l.msg === 'a claim whose reply was lost was given back once the store answered'), 5000);
      assert.equal(given.result, 'released', 'the claim again had taken effect: the key was deleted');
      up.behave(answer());
      const retry = await send(`${p.url}/waiting/1`, { headers, body: '{"w":1}' });
      assert.equal(retry.status, 201, 'the retry runs at once, not after the 10 s lease');
      assert.equal(retry.headers['idempotent-replayed'], undefined);
      assert.equal(up.executions(k), 2, 'the first request (refused) and the retry; the waiter ran nothing');
    } finally {
      await p.close();
      await relay.close();
    }
  });

  // A claim that outlives store.timeout on the server: it waits for a row lock (another session inserted the
  // same key and has not committed), the proxy stops waiting and answers 503, and the claim commits once the
  // lock is gone. Not there yet when first looked for, it is looked for again, found and given back.
  test('a claim that commits after the proxy stopped waiting for it is given back too: the retry runs', async () => {
    const { proxy: p, lines } = await startLoggedProxy({ upstream: up.url, databaseUrl: pgc.url, yaml: YAML.replace('store: { poolSize: 4 }', 'store: { poolSize: 4, timeout: 1s }') });
    const blocker = new pg.Client({ connectionString: pgc.url });
    try {
      await blocker.connect();
      up.behave(answer());
      const k = 'pg-late-claim';
      const headers = { 'idempotency-key': k, 'x-tenant': 'tenant-0' };
      await blocker.query('BEGIN');
      await blocker.query(`INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, state, expires_at)
                           VALUES ('tenant-0', $1, '\\x00', 'complete', now() + interval '1 hour')`, [k]);
      const first = await send(`${p.url}/strict/1`, { headers, body: '{"l":1}' });
      assert.equal(first.status, 503, 'the claim waits on the lock past store.timeout');
      await sleep(1500); // looked for at least once meanwhile, and not found: it has not committed
      await blocker.query('ROLLBACK'); // the claim goes on, and commits
      const given = await waitFor('the late claim to be given back', () =>
        lines.find((l) => l.msg === 'a claim whose reply was lost was given back once the store answered'), 10_000);
      assert.equal(given.result, 'released');
      assert.ok(Number(given.attempts) > 2, `found on a later look (attempt ${String(given.attempts)})`);
      const retry = await send(`${p.url}/strict/1`, { headers, body: '{"l":1}' });
      assert.equal(retry.status, 201);
      assert.equal(up.executions(k), 1);
    } finally {
      await blocker.end().catch(() => {});
      await p.close();
    }
  });

  test('a commit that took effect but whose reply was lost: the retried commit succeeds, the client gets its answer', async () => {
    const relay = await startPgRelay(pgc.port);
    const p = await startTestProxy({ upstream: up.url, databaseUrl: `postgres://postgres@127.0.0.1:${relay.port}/postgres`, yaml: YAML });
    try {
      up.behave(answer());
      const warm = await send(`${p.url}/orders/1`, { headers: { 'idempotency-key': 'pg-lost-warm', 'x-tenant': 'tenant-0' }, body: '{}' });
      assert.equal(warm.status, 201);
      const k = 'pg-lost-reply';
      // A lone commit goes as the single-row statement.
      const lost = relay.loseNextReply(commitOneStatement.name);
      const r = await send(`${p.url}/orders/1`, { headers: { 'idempotency-key': k, 'x-tenant': 'tenant-0' }, body: '{"x":1}' }).catch((e: Error) => e);
      let seen = false;
      void lost.then(() => (seen = true));
      await waitFor(`the ${commitOneStatement.name} reply the relay drops`, () => seen, 10_000);
      assert.ok(!(r instanceof Error), `the record is committed, so the client must get its answer (${(r as Error).message})`);
      assert.equal(r.status, 201);
      const fenced = (await p.metrics.leaseLost.get()).values.reduce((a, v) => a + v.value, 0);
      assert.equal(fenced, 0, 'no lease was lost: the commit was ours');
      assert.equal(up.executions(k), 1);
    } finally {
      await p.close();
      await relay.close();
    }
  });
});
