// onInFlight: wait — a duplicate sent while the first request runs waits for
// its commit and gets the replay instead of 409; past waitTimeout it gets the
// 409. Across instances it finds out by backoff polling. Waiting holds no
// database connection: 30 waiters on a pool of 2 all get the replay, and the
// first request's commit is not held up.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send, together, type Reply } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { problemType } from './support.js';
import { sleep } from '../helpers/wait.js';

const YAML = `
store: { poolSize: 2 }
routes:
  - name: wait
    match: { path: /wait/** }
    tenant: { constant: t }
    lease: 10s
    onInFlight: wait
    waitTimeout: 3s
  - name: short-wait
    match: { path: /short/** }
    tenant: { constant: t }
    lease: 10s
    onInFlight: wait
    waitTimeout: 300ms
  - name: conflict
    match: { path: /conflict/** }
    tenant: { constant: t }
`;

const DELAY: Record<string, number> = { '/wait/pay': 1000, '/wait/crowd': 1000, '/wait/limited': 500, '/short/pay': 2000, '/conflict/pay': 600 };

type Timed = Reply & { ms: number };

async function timed(p: Promise<Reply>): Promise<Timed> {
  const t0 = performance.now();
  const r = await p;
  return Object.assign(r, { ms: performance.now() - t0 });
}

function split<R extends Reply>(replies: R[]): { executed: R[]; replayed: R[]; other: R[] } {
  return {
    executed: replies.filter((r) => r.status === 201 && r.headers['idempotent-replayed'] === undefined),
    replayed: replies.filter((r) => r.status === 201 && r.headers['idempotent-replayed'] === 'true'),
    other: replies.filter((r) => r.status !== 201),
  };
}

describe('onInFlight: wait', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let a: RunningProxy;
  let b: RunningProxy;
  const hits = (path: string): number => upstream.received.filter((r) => r.url === path).length;
  const post = (proxy: RunningProxy, path: string, key: string): Promise<Timed> =>
    timed(send(`${proxy.url}${path}`, { headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: '{"amount":5}' }));

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream((req, n, res) => {
      // The first /wait/limited call is rate limited (429: released, not bound to the key).
      const limited = req.url === '/wait/limited' && upstream.received.filter((r) => r.url === req.url).length === 1;
      return jsonResponder(limited ? 429 : 201, DELAY[req.url] ?? 0)(req, n, res);
    });
    // Two instances sharing one database.
    [a, b] = await Promise.all([
      startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML }),
      startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML }),
    ]);
  });
  after(async () => {
    await a?.close();
    await b?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('a duplicate sent while the first runs gets the replay, not 409', async () => {
    const replies = await together(2, () => post(a, '/wait/pay', 'w-1'));
    const { executed, replayed, other } = split(replies);
    assert.equal(other.length, 0, `unexpected ${other.map((r) => `${r.status} ${r.text()}`)}`);
    assert.equal(executed.length, 1);
    assert.equal(replayed.length, 1);
    assert.deepEqual(replayed[0]!.body, executed[0]!.body);
    assert.equal(hits('/wait/pay'), 1);
    // The waiter was woken by the commit, not by a late poll.
    assert.ok(Math.abs(replies[0]!.ms - replies[1]!.ms) < 300, `answers ${replies.map((r) => Math.round(r.ms))} ms apart`);
  });

  test('without wait the same race answers 409 (the contrast)', async () => {
    const replies = await together(2, () => post(a, '/conflict/pay', 'c-1'));
    assert.deepEqual(replies.map((r) => r.status).sort(), [201, 409]);
  });

  test('past waitTimeout the duplicate gets the usual 409 with Retry-After', async () => {
    const first = post(a, '/short/pay', 's-1');
    await sleep(100);
    const dup = await post(a, '/short/pay', 's-1');
    assert.equal(dup.status, 409);
    assert.equal(problemType(dup), 'in-flight');
    assert.ok(Number(dup.headers['retry-after']) >= 1);
    assert.ok(dup.ms >= 280 && dup.ms < 1500, `answered after ${Math.round(dup.ms)} ms`);
    assert.equal((await first).status, 201);
    assert.equal(hits('/short/pay'), 1);
  });

  test('across two instances sharing a database, the duplicate on the other instance gets the replay', async () => {
    const [onA, onB] = await Promise.all([post(a, '/wait/pay', 'x-1'), post(b, '/wait/pay', 'x-1')]);
    const { executed, replayed, other } = split([onA, onB]);
    assert.equal(other.length, 0, `unexpected ${other.map((r) => `${r.status} ${r.text()}`)}`);
    assert.equal(executed.length, 1);
    assert.equal(replayed.length, 1);
    assert.deepEqual(replayed[0]!.body, executed[0]!.body);
    assert.equal(upstream.received.filter((r) => r.url === '/wait/pay').length, 2, 'one execution for w-1, one for x-1');
    // Backoff polling: the remote waiter learns within one backoff step (≤ 500 ms).
    assert.ok(replayed[0]!.ms < executed[0]!.ms + 700, `replay ${Math.round(replayed[0]!.ms)} ms vs ${Math.round(executed[0]!.ms)} ms`);
  });

  test('when the first request releases its key (429), a waiter on another instance claims it and runs', async () => {
    const [onA, onB] = await Promise.all([post(a, '/wait/limited', 'l-1'), post(b, '/wait/limited', 'l-1')]);
    assert.deepEqual([onA.status, onB.status].sort(), [201, 429]);
    const ran = [onA, onB].find((r) => r.status === 201)!;
    assert.equal(ran.headers['idempotent-replayed'], undefined, 'the waiter executed, it was not handed the 429');
    assert.equal(hits('/wait/limited'), 2);
  });

  test('30 waiters on a pool of 2 connections: all replayed, the commit is not starved, no tight polling', async () => {
    // Count the store calls the crowd makes (the real store still answers them).
    const store = a.store as unknown as Record<'claim' | 'get', (...args: unknown[]) => Promise<unknown>>;
    const calls = { claim: 0, get: 0 };
    const originals = { claim: store.claim, get: store.get };
    for (const op of ['claim', 'get'] as const) {
      store[op] = function (this: unknown, ...args: unknown[]) {
        calls[op]++;
        return originals[op].apply(this, args);
      };
    }
    // Sampled while the crowd waits: busy proxy connections, and any that sit
    // idle inside an open transaction (a waiter parked in the database).
    let connections = 0;
    let parked = 0;
    let sampling: Promise<unknown> = Promise.resolve();
    const watch = setInterval(() => {
      sampling = sql<{ busy: number; parked: number }>(db.url, `
        SELECT count(*) FILTER (WHERE state <> 'idle')::int AS busy,
               count(*) FILTER (WHERE state LIKE 'idle in transaction%')::int AS parked
          FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'idempotency-proxy'`)
        .then((r) => {
          connections = Math.max(connections, r[0]!.busy);
          parked = Math.max(parked, r[0]!.parked);
        }, () => {});
    }, 50);
    try {
      const replies = await together(31, () => post(a, '/wait/crowd', 'crowd-1'));
      const { executed, replayed, other } = split(replies);
      assert.equal(other.length, 0, `unexpected ${other.map((r) => `${r.status} ${r.text()}`)}`);
      assert.equal(executed.length, 1);
      assert.equal(replayed.length, 30);
      assert.equal(hits('/wait/crowd'), 1);
      assert.ok(executed[0]!.ms < 1700, `the first request took ${Math.round(executed[0]!.ms)} ms for a 1000 ms upstream`);
      for (const r of replayed) assert.ok(r.ms < 2200, `a waiter took ${Math.round(r.ms)} ms`);
      // 31 first claims and one more per waiter when the commit wakes it; in
      // between, a plain read on a 25→500 ms backoff (≈6 in 1 s), never a loop.
      assert.ok(calls.claim <= 31 + 30, `${calls.claim} claim statements`);
      assert.ok(calls.get <= 30 * 8, `${calls.get} reads for 30 waiters over ~1 s`);
      assert.ok(connections <= 2, `${connections} busy connections seen (pool 2)`);
      assert.equal(parked, 0, 'no waiter holds a transaction open in the database');
    } finally {
      clearInterval(watch);
      await sampling; // never leave a query running into the database's drop
      Object.assign(store, originals);
    }
  });
});
