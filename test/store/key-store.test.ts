import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { KeyStore } from '../../src/store/key-store.js';
import { sweepOnce } from '../../src/store/sweeper.js';
import { migrate } from '../../src/store/migrate.js';
import type { ClaimRequest, StoredResponse } from '../../src/store/records.js';
import type { Db } from '../../src/store/db/port.js';
import { openBackend, type Backend } from '../helpers/db.js';
import { citusNodes } from '../helpers/citus.js';
import { claimStatement, loneInsertStatement, loneReadStatement } from '../../src/store/sql/claim.js';
import { commitOneStatement, commitStatement } from '../../src/store/sql/commit.js';
import { sleep } from '../helpers/wait.js';

const fp = (s: string) => createHash('sha256').update(s).digest();

function claimReq(key: string, over: Partial<ClaimRequest> = {}): ClaimRequest {
  return {
    tenantId: 't1', key, fingerprint: fp('body'), ownerToken: randomUUID(), leaseMs: 60_000, ttlMs: 3_600_000,
    onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/p', ...over,
  };
}

const response: StoredResponse = {
  status: 201,
  headers: [['content-type', 'application/octet-stream'], ['set-cookie', 'a=1'], ['set-cookie', 'b=2']],
  body: Buffer.from([0, 1, 2, 255, 254, 0x1f, 0x8b]),
  bodyRetained: true,
  bodySize: 7,
};

const raw = (db: Db, text: string, values: unknown[] = []) => db.query({ name: '', text }, values);

// Every case runs with a lone claim or commit on its single-row statement (as
// the proxy runs) and again with everything through the batch statement: the
// two must keep the same contract.
// On plain PostgreSQL and the embedded store the proxy sends a batch of
// several tenants as one statement (crossTenantBatches): the contract runs a
// third time that way. Never on Citus (one statement, one tenant's shard).
const modes = [
  { label: 'single-row statements for lone requests', singleRowStatements: true, crossTenantBatches: false },
  { label: 'batch statements only', singleRowStatements: false, crossTenantBatches: false },
  // As the proxy runs on Citus: every key claimed by a read and an insert, committed by its own UPDATE.
  { label: 'every key by its own single-row statements', singleRowStatements: true, crossTenantBatches: false, perKeyStatements: true },
  ...(citusNodes === null ? [{ label: 'batches across tenants', singleRowStatements: true, crossTenantBatches: true }] : []),
];

for (const backend of ['postgres', 'pglite', 'pgbouncer'] as Backend[]) for (const mode of modes) {
  describe(`KeyStore on ${backend}, ${mode.label}`, () => {
    let db: Db;
    let close: () => Promise<void>;
    let store: KeyStore;
    const options = { singleRowStatements: mode.singleRowStatements, crossTenantBatches: mode.crossTenantBatches, perKeyStatements: mode.perKeyStatements ?? false };
    before(async () => {
      ({ db, close } = await openBackend(backend));
      store = new KeyStore(db, options);
    });
    after(async () => close());

    test('migrate is idempotent', async () => {
      const again = await migrate(db);
      assert.equal(again.applied.length, 0);
    });

    test('claim, duplicate in flight, commit, replay byte for byte', async () => {
      const first = claimReq('k-basic');
      assert.deepEqual(await store.claim(first), { kind: 'claimed', attempt: 1 });
      const dup = await store.claim(claimReq('k-basic'));
      assert.equal(dup.kind, 'in_flight');
      assert.ok(dup.kind === 'in_flight' && dup.retryAfterS >= 59 && dup.retryAfterS <= 60);
      const c = await store.commit({ tenantId: 't1', key: 'k-basic', ownerToken: first.ownerToken, response });
      assert.equal(c.committed, true);
      const replay = await store.claim(claimReq('k-basic'));
      assert.equal(replay.kind, 'complete');
      assert.ok(replay.kind === 'complete');
      assert.equal(replay.response.status, 201);
      assert.deepEqual(replay.response.headers, response.headers);
      assert.ok(replay.response.body.equals(response.body));
    });

    test('different fingerprint is a mismatch, in flight and complete', async () => {
      const first = claimReq('k-mm');
      await store.claim(first);
      assert.equal((await store.claim(claimReq('k-mm', { fingerprint: fp('other') }))).kind, 'mismatch');
      await store.commit({ tenantId: 't1', key: 'k-mm', ownerToken: first.ownerToken, response });
      assert.equal((await store.claim(claimReq('k-mm', { fingerprint: fp('other') }))).kind, 'mismatch');
    });

    test('keys are scoped by tenant', async () => {
      assert.equal((await store.claim(claimReq('k-ten', { tenantId: 'a' }))).kind, 'claimed');
      assert.equal((await store.claim(claimReq('k-ten', { tenantId: 'b' }))).kind, 'claimed');
    });

    test('release gives the key back; a foreign owner token cannot release or commit', async () => {
      const first = claimReq('k-rel');
      await store.claim(first);
      await store.release('t1', 'k-rel', randomUUID());
      assert.equal((await store.claim(claimReq('k-rel'))).kind, 'in_flight');
      const fenced = await store.commit({ tenantId: 't1', key: 'k-rel', ownerToken: randomUUID(), response });
      assert.equal(fenced.committed, false);
      await store.release('t1', 'k-rel', first.ownerToken);
      assert.equal((await store.claim(claimReq('k-rel'))).kind, 'claimed');
    });

    test('abandon gives a claim back as it found the key: a new key deleted, the lease of a takeover ended, nothing else touched', async () => {
      // A claim that inserted the key (attempt 1): deleted; the next claim is a first attempt.
      const fresh = claimReq('k-abandon');
      await store.claim(fresh);
      assert.equal(await store.abandon('t1', 'k-abandon', randomUUID()), 'none', 'another owner token');
      assert.equal(await store.abandon('t1', 'k-abandon', fresh.ownerToken), 'released');
      assert.equal(await store.get('t1', 'k-abandon'), null);
      assert.deepEqual(await store.claim(claimReq('k-abandon')), { kind: 'claimed', attempt: 1 });
      // A claim that took an expired lease over (attempt 2): the row stays, its lease over, and the next claim
      // takes it over as attempt 3, under the route's onExpiredLease, as it would have without that claim.
      const crashed = claimReq('k-abandon-takeover', { leaseMs: 1 });
      await store.claim(crashed);
      await sleep(20);
      const takeover = claimReq('k-abandon-takeover');
      assert.deepEqual(await store.claim(takeover), { kind: 'claimed', attempt: 2 });
      assert.equal(await store.abandon('t1', 'k-abandon-takeover', takeover.ownerToken), 'lease_ended');
      assert.equal((await store.get('t1', 'k-abandon-takeover'))?.state, 'in_flight');
      assert.deepEqual(await store.claim(claimReq('k-abandon-takeover')), { kind: 'claimed', attempt: 3 });
      // A completed key is never touched.
      const done = claimReq('k-abandon-done');
      await store.claim(done);
      await store.commit({ tenantId: 't1', key: 'k-abandon-done', ownerToken: done.ownerToken, response });
      assert.equal(await store.abandon('t1', 'k-abandon-done', done.ownerToken), 'none');
      assert.equal((await store.get('t1', 'k-abandon-done'))?.state, 'complete');
    });

    test('expired lease: reexecute takes over and fences the old owner out', async () => {
      const first = claimReq('k-lease', { leaseMs: 1 });
      await store.claim(first);
      await sleep(20);
      // a different payload never takes over
      assert.equal((await store.claim(claimReq('k-lease', { fingerprint: fp('x') }))).kind, 'mismatch');
      const second = claimReq('k-lease');
      assert.deepEqual(await store.claim(second), { kind: 'claimed', attempt: 2 });
      assert.equal((await store.commit({ tenantId: 't1', key: 'k-lease', ownerToken: first.ownerToken, response })).committed, false);
      assert.equal(await store.extend('t1', 'k-lease', first.ownerToken, 1000), false);
      assert.equal(await store.extend('t1', 'k-lease', second.ownerToken, 60_000), true);
      assert.equal((await store.commit({ tenantId: 't1', key: 'k-lease', ownerToken: second.ownerToken, response })).committed, true);
    });

    test('expired lease with onExpiredLease fail becomes outcome_unknown until purged', async () => {
      await store.claim(claimReq('k-fail', { leaseMs: 1, onExpiredLease: 'fail' }));
      await sleep(20);
      assert.equal((await store.claim(claimReq('k-fail'))).kind, 'outcome_unknown');
      assert.equal((await store.claim(claimReq('k-fail'))).kind, 'outcome_unknown');
      const rec = await store.get('t1', 'k-fail');
      assert.equal(rec?.state, 'outcome_unknown');
      assert.equal(await store.purge('t1', 'k-fail'), 'outcome_unknown');
      assert.equal((await store.claim(claimReq('k-fail'))).kind, 'claimed');
    });

    test('extend keeps a live lease alive', async () => {
      const first = claimReq('k-ext', { leaseMs: 300 });
      await store.claim(first);
      assert.equal(await store.extend('t1', 'k-ext', first.ownerToken, 60_000), true);
      await sleep(400);
      assert.equal((await store.claim(claimReq('k-ext'))).kind, 'in_flight');
    });

    test('retention expiry makes a key new again, and the sweeper removes expired rows', async () => {
      const first = claimReq('k-ttl');
      await store.claim(first);
      await store.commit({ tenantId: 't1', key: 'k-ttl', ownerToken: first.ownerToken, response });
      await store.claim(claimReq('k-ttl-2'));
      // k-ttl-2 is in flight: its lease must be over too, or it is still in use (not expired).
      await raw(db, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second', locked_until = now() - interval '1 second' WHERE idem_key IN ('k-ttl', 'k-ttl-2')`);
      assert.deepEqual(await store.claim(claimReq('k-ttl', { fingerprint: fp('new payload') })), { kind: 'claimed', attempt: 1 });
      const r = await sweepOnce(db, 1);
      assert.equal(r.locked, true);
      assert.equal(r.deleted, 1);
      assert.equal(await store.get('t1', 'k-ttl-2'), null);
      assert.notEqual(await store.get('t1', 'k-ttl'), null);
    });

    test('50 concurrent claims of one key: exactly one wins', async () => {
      const outcomes = await Promise.all(Array.from({ length: 50 }, () => store.claim(claimReq('k-race'))));
      assert.equal(outcomes.filter((o) => o.kind === 'claimed').length, 1);
      assert.equal(outcomes.filter((o) => o.kind === 'in_flight').length, 49);
    });

    test('two proxies claiming the same new keys at the same moment: each key claimed once, the loser sees it in flight', async () => {
      // Two stores, two batchers: nothing folds their claims together, so they meet in the database
      // (with perKeyStatements both reads find no row and one insert loses: its store claims again).
      const other = new KeyStore(db, options);
      for (let round = 0; round < 10; round++) {
        const key = `k-two-proxies-${round}`;
        const outcomes = await Promise.all([store, other, store, other].map((s) => s.claim(claimReq(key))));
        assert.deepEqual(outcomes.map((o) => o.kind).sort(), ['claimed', 'in_flight', 'in_flight', 'in_flight'], key);
      }
    });

    test('a storm of duplicates folded into one batch: one claim, the rest in flight or mismatched by payload', async () => {
      const reqs = Array.from({ length: 40 }, (_, i) => claimReq('k-storm', { fingerprint: fp(i % 4 === 3 ? 'other' : 'body') }));
      const outcomes = await Promise.all(reqs.map((r) => store.claim(r)));
      const winner = outcomes.findIndex((o) => o.kind === 'claimed');
      assert.equal(outcomes.filter((o) => o.kind === 'claimed').length, 1);
      const winnerFp = reqs[winner]!.fingerprint;
      outcomes.forEach((o, i) => {
        if (i === winner) return;
        assert.equal(o.kind, reqs[i]!.fingerprint.equals(winnerFp) ? 'in_flight' : 'mismatch', `request ${i}`);
      });
    });

    test('duplicates of settled keys take no row lock and write nothing, in a batch beside a new key', async () => {
      // Settled: complete (same and other payload), in flight with a live
      // lease (same and other payload), outcome_unknown, in flight with its
      // lease over under another payload. xmax names the last transaction
      // that locked or replaced the row version: a claim that takes a row
      // lock changes it (and must then flush its commit).
      const done = claimReq('k-ro-done');
      await store.claim(done);
      await store.commit({ tenantId: 't1', key: 'k-ro-done', ownerToken: done.ownerToken, response });
      await store.claim(claimReq('k-ro-live'));
      await store.claim(claimReq('k-ro-unknown', { leaseMs: 1, onExpiredLease: 'fail' }));
      await store.claim(claimReq('k-ro-lapsed', { leaseMs: 1 }));
      await sleep(20);
      assert.equal((await store.claim(claimReq('k-ro-unknown'))).kind, 'outcome_unknown');
      const settled = ['k-ro-done', 'k-ro-live', 'k-ro-unknown', 'k-ro-lapsed'];
      const xmax = async (): Promise<Record<string, string>> => Object.fromEntries(
        (await raw(db, `SELECT idem_key, xmax::text AS xmax FROM idempotency_keys WHERE tenant_id = 't1' AND idem_key = ANY($1)`, [settled]) as Array<{ idem_key: string; xmax: string }>)
          .map((r) => [r.idem_key, r.xmax]));
      const before = await xmax();
      assert.deepEqual(Object.keys(before).sort(), [...settled].sort());

      const other = fp('other payload');
      const reqs = [
        claimReq('k-ro-done'), claimReq('k-ro-done', { fingerprint: other }),
        claimReq('k-ro-live'), claimReq('k-ro-live', { fingerprint: other }),
        claimReq('k-ro-unknown'), claimReq('k-ro-lapsed', { fingerprint: other }),
        claimReq('k-ro-new'),
      ];
      const outcomes = await Promise.all(reqs.map((r) => store.claim(r)));
      assert.deepEqual(outcomes.map((o) => o.kind), ['complete', 'mismatch', 'in_flight', 'mismatch', 'outcome_unknown', 'mismatch', 'claimed']);
      const replay = outcomes[0]!;
      assert.ok(replay.kind === 'complete' && replay.response.body.equals(response.body));
      assert.deepEqual(await xmax(), before, 'a duplicate locked a settled row');
      // The lapsed lease under its own payload is still taken over (the locking path).
      assert.deepEqual(await store.claim(claimReq('k-ro-lapsed')), { kind: 'claimed', attempt: 2 });
    });

    test('claims and commits submitted in one turn of the event loop share one statement each, even on an idle store', async () => {
      const batches: Array<[string, number]> = [];
      const grouped = new KeyStore(db, { ...options, onBatch: (statement, rows) => batches.push([statement, rows]) });
      const reqs = Array.from({ length: 30 }, (_, i) => claimReq(`k-turn-${i}`));
      const outcomes = await Promise.all(reqs.map((r) => grouped.claim(r)));
      assert.ok(outcomes.every((o) => o.kind === 'claimed'));
      const commits = await Promise.all(reqs.map((r) => grouped.commit({ tenantId: r.tenantId, key: r.key, ownerToken: r.ownerToken, response })));
      assert.ok(commits.every((c) => c.committed));
      // Sent at once, the first one or two would each have gone alone.
      assert.deepEqual(batches, [['claim', 30], ['commit', 30]]);
    });

    test('a lone claim or commit goes as the single-row statement when enabled; a turn of several, and a storm folded to one key, as the batch statement', async () => {
      const names: string[] = [];
      const watched: Db = { ...db, query: (stmt, values) => (names.push(stmt.name), db.query(stmt, values)) };
      const s = new KeyStore(watched, options);
      const one = claimReq('k-lone');
      assert.deepEqual(await s.claim(one), { kind: 'claimed', attempt: 1 });
      assert.equal((await s.commit({ tenantId: 't1', key: 'k-lone', ownerToken: one.ownerToken, response })).committed, true);
      const replay = await s.claim(claimReq('k-lone'));
      assert.ok(replay.kind === 'complete' && replay.response.body.equals(response.body));
      const pair = [claimReq('k-pair-a'), claimReq('k-pair-b')];
      assert.ok((await Promise.all(pair.map((r) => s.claim(r)))).every((o) => o.kind === 'claimed'));
      const storm = Array.from({ length: 3 }, () => claimReq('k-lone-storm'));
      const kinds = (await Promise.all(storm.map((r) => s.claim(r)))).map((o) => o.kind).sort();
      assert.deepEqual(kinds, ['claimed', 'in_flight', 'in_flight']);
      const lone = mode.singleRowStatements;
      // A claim is one call, new key or duplicate (it inserts the new keys
      // and reads the others); the pair is one call of two keys; the storm
      // folds to one key: one call.
      if (mode.perKeyStatements !== true) {
        assert.deepEqual(names, [
          claimStatement.name,
          (lone ? commitOneStatement : commitStatement).name,
          claimStatement.name,
          claimStatement.name,
          claimStatement.name,
        ]);
      } else {
        // With perKeyStatements (Citus) every key is a read, and an insert only when the read found
        // no row: the pair's two keys side by side (in either order), never the call.
        const read = loneReadStatement.name;
        const insert = loneInsertStatement.name;
        assert.deepEqual(names.slice(0, 4), [read, insert, commitOneStatement.name, read]);
        assert.deepEqual(names.slice(4, 8).sort(), [read, read, insert, insert].sort());
        assert.deepEqual(names.slice(8), [read, insert]);
      }
    });

    test('a turn of claims and commits of several tenants: one statement each across tenants, else one per tenant; each key claimed once', async () => {
      const batches: Array<[string, number]> = [];
      const grouped = new KeyStore(db, { ...options, onBatch: (statement, rows) => batches.push([statement, rows]) });
      // keyScope: tenantAndPath makes every path a tenant; the same key under two tenants is two keys.
      const tenants = Array.from({ length: 8 }, (_, i) => `t-mix /v1/checkout_sessions/cs_${i}/complete`);
      const reqs = tenants.flatMap((tenantId) => [claimReq('k-mix-a', { tenantId }), claimReq('k-mix-b', { tenantId })]);
      const twins = tenants.map((tenantId) => claimReq('k-mix-a', { tenantId })); // duplicates in the same turn
      const outcomes = await Promise.all([...reqs, ...twins].map((r) => grouped.claim(r)));
      assert.deepEqual(outcomes.slice(0, reqs.length).map((o) => o.kind), reqs.map(() => 'claimed'));
      assert.deepEqual(outcomes.slice(reqs.length).map((o) => o.kind), twins.map(() => 'in_flight'));
      const bodies = reqs.map((r) => Buffer.from(`${r.tenantId}|${r.key}`));
      const commits = await Promise.all(reqs.map((r, i) => grouped.commit({
        tenantId: r.tenantId, key: r.key, ownerToken: r.ownerToken, response: { ...response, body: bodies[i]!, bodySize: bodies[i]!.length },
      })));
      assert.ok(commits.every((c) => c.committed && !c.kept));
      const replays = await Promise.all(reqs.map((r) => grouped.claim(claimReq(r.key, { tenantId: r.tenantId }))));
      replays.forEach((o, i) => assert.ok(o.kind === 'complete' && o.response.body.equals(bodies[i]!), `replay ${i}`));
      const perTenant = (statement: string): Array<[string, number]> => tenants.map(() => [statement, 2]);
      assert.deepEqual(batches, mode.crossTenantBatches
        ? [['claim', reqs.length], ['commit', reqs.length], ['claim', reqs.length]]
        : [...perTenant('claim'), ...perTenant('commit'), ...perTenant('claim')]);
    });

    test('200 concurrent claims of distinct keys are batched and all claimed', async () => {
      const reqs = Array.from({ length: 200 }, (_, i) => claimReq(`k-many-${i}`));
      const outcomes = await Promise.all(reqs.map((r) => store.claim(r)));
      assert.ok(outcomes.every((o) => o.kind === 'claimed'));
      const commits = await Promise.all(reqs.map((r) => store.commit({ tenantId: r.tenantId, key: r.key, ownerToken: r.ownerToken, response })));
      assert.ok(commits.every((c) => c.committed));
    });
  });
}
