import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { ClaimFailedError, claimMayHaveTaken } from '../../src/errors.js';
import { createPgDb } from '../../src/store/db/pg.js';
import { StoreUnavailableError, type Db } from '../../src/store/db/port.js';
import { KeyStore } from '../../src/store/key-store.js';
import type { ClaimRequest } from '../../src/store/records.js';
import { claimStatement } from '../../src/store/sql/claim.js';
import { claimLone, claimTenant, claimTenants, type ClaimRow } from '../../src/store/tenant-claim.js';
import { createTestDatabase, lockWaiters, row, whileRefusing, type TestDatabase } from '../helpers/db.js';
import { holdingAnswers } from '../helpers/late-answers.js';
import { sleep, waitFor } from '../helpers/wait.js';

// The claim is one call (migration 4): insert the new keys, then read the
// rows of the keys the insert left alone. The edge of that order: a claim of
// a key whose row another transaction inserted and commits while the insert
// waits. The insert then leaves the key alone, and the row it met was
// committed after the call started. A single statement would read it with
// the snapshot it started with, find nothing, and the store would have to
// claim again; the call's read is its own statement with a snapshot of its
// own, so it sees the row: one call answers.

const fingerprint = Buffer.alloc(32, 7);
const req = (key: string, tenantId = 't-race'): ClaimRequest => ({
  tenantId, key, fingerprint, ownerToken: randomUUID(), leaseMs: 60_000, ttlMs: 3_600_000,
  onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/p',
});

// One database for both suites below.
let t: TestDatabase;
let db: Db;
before(async () => {
  t = await createTestDatabase();
  db = createPgDb({ connectionString: t.url, max: 2 });
});
after(async () => {
  await db?.close();
  await t?.drop();
});

describe('the claim call against a concurrent insert of the same key', () => {
  test('a key inserted and committed while the call waits on it is answered from that row by the same call', async () => {
    let calls = 0;
    const watched: Db = { ...db, query: (stmt, values, budget) => { if (stmt.name === claimStatement.name) calls++; return db.query(stmt, values, budget); } };
    const store = new KeyStore(watched, { maxInFlight: 1 });
    for (let round = 0; round < 3; round++) {
      const key = `k-race-${round}`;
      // The other claim: its insert holds the key's row, uncommitted.
      const other = new pg.Client({ connectionString: t.url });
      await other.connect();
      try {
        await other.query('BEGIN');
        const first = req(key);
        await other.query(claimStatement.text, [first.tenantId, [key], [fingerprint.toString('hex')], [first.ownerToken],
          [first.leaseMs], [first.ttlMs], [first.onExpiredLease], [first.route], [first.method], [first.path]]);
        calls = 0;
        const pending = store.claim(req(key));
        await waitFor('the claim call to wait on the uncommitted insert', async () => (await lockWaiters(t.url)) > 0);
        await other.query('COMMIT');
        const outcome = await pending;
        assert.equal(outcome.kind, 'in_flight', `round ${round}: ${JSON.stringify(outcome)}`);
        assert.equal(calls, 1, `round ${round}: the store claimed ${calls} times (the call found nothing and was sent again)`);
      } finally {
        await other.end();
      }
    }
  });
});

// Every claim row the store hands on has the same fields in the same order,
// whichever statement it came from (the claim call, the lone read and insert,
// the call of several tenants) and whether the key was inserted or found:
// the precondition for one hidden class in V8, so the field reads of
// src/store/key-store.ts (rawFromRow, decide, toStored) stay monomorphic.
// Spreads of node-postgres's rows carried each statement's own columns in
// its own order, and every replay paid for megamorphic reads (src/store/
// tenant-claim.ts, claimRow; docs/tracing-cost.md, 2026-12-04).

const FIELDS = [
  'claimed', 'claim_attempt', 'state', 'fingerprint', 'status_code', 'response_headers', 'response_body',
  'body_retained', 'body_size', 'retry_after_s', 'ttl_left_ms', 'lease_over', 'trace_context',
];

describe('claim rows: one shape from every statement', () => {
  test('inserted and found rows of the claim call, the lone statements and the call of several tenants have the same fields in the same order', async () => {
    const rows: Array<[string, ClaimRow]> = [];
    const [inserted] = await claimTenant(db, 'ta', [req('k1', 'ta')]);
    rows.push(['claim call, inserted', inserted!]);
    const [found] = await claimTenant(db, 'ta', [req('k1', 'ta')]);
    rows.push(['claim call, found in flight', found!]);
    rows.push(['lone insert', await claimLone(db, 'ta', req('k2', 'ta'))]);
    rows.push(['lone read, found in flight', await claimLone(db, 'ta', req('k2', 'ta'))]);
    const groups = (key: string) => [{ tenantId: 'ta', items: [req(key, 'ta')] }, { tenantId: 'tb', items: [req(key, 'tb')] }];
    const [[newA], [newB]] = await claimTenants(db, groups('k3'));
    rows.push(['several tenants, inserted (ta)', newA!], ['several tenants, inserted (tb)', newB!]);
    const [[againA], [againB]] = await claimTenants(db, groups('k3'));
    rows.push(['several tenants, found (ta)', againA!], ['several tenants, found (tb)', againB!]);

    // Each case is what its name says (so the comparison below covers both kinds of row).
    for (const [name, row] of rows) {
      assert.equal(row.claimed, !name.includes('found'), `${name}: claimed ${String(row.claimed)}`);
      assert.equal(row.state, 'in_flight', `${name}: state ${String(row.state)}`);
    }
    for (const [name, row] of rows) assert.deepEqual(Object.keys(row), FIELDS, `${name}: its fields or their order differ`);
  });
});

// A claim that fails after a statement of it took keys: the claim call inserted a new key and then the takeover
// of an expired one failed unsent (the call's answer came late and left no budget), or another of the batch's
// claims took keys while one failed. Its requests are answered 503 and run nothing: the error must say the claim
// may have taken keys, so that each gives its claim back (src/lifecycle/give-back.ts). Said not to, a key the
// call inserted stayed in flight for its lease, and on an `onExpiredLease: fail` route became outcome_unknown.

/** The real store, whose answers to the statements that name tenant `late` arrive `holdMs` after they came, with a store.timeout of `timeoutMs`. */
function answeringLate(real: Db, late: string, holdMs: number, timeoutMs: number): Db {
  return holdingAnswers(real, [{ match: late, ms: holdMs, seen: [] }], timeoutMs);
}

/** A key of `tenantId` claimed with a lease of 1 ms, over by the time it is claimed again. */
async function expired(tenantId: string, key: string): Promise<ClaimRequest> {
  const [row] = await claimTenant(db, tenantId, [{ ...req(key, tenantId), leaseMs: 1 }]);
  assert.equal(row!.claimed, true);
  await sleep(20);
  return req(key, tenantId);
}

const BUDGET_MS = 200;
const LATE_MS = BUDGET_MS + 100;

async function refusal(p: Promise<unknown>): Promise<StoreUnavailableError> {
  const err = await p.then(() => null, (e: unknown) => e);
  assert.ok(err instanceof StoreUnavailableError, `rejected with ${String(err)}`);
  return err;
}

describe('a claim that fails after it took keys says it may have taken them', () => {
  test('the call inserted a new key, then the takeover of an expired one could not be sent: marked', async () => {
    const items = [await expired('tl1', 'old'), req('new', 'tl1')];
    const err = await refusal(claimTenant(answeringLate(db, 'tl1', LATE_MS, BUDGET_MS), 'tl1', items, BUDGET_MS));
    assert.match(err.message, /spent before this statement was sent/);
    assert.equal((await row(t.url, 'new'))?.state, 'in_flight', 'the call claimed the new key before the takeover failed');
    assert.equal(err.maybeApplied, true, 'a key was claimed: its request must give it back');
  });

  test('the call of several tenants inserted keys, then a takeover could not be sent: marked', async () => {
    const groups = [{ tenantId: 'tl2', items: [await expired('tl2', 'old2')] }, { tenantId: 'tl3', items: [req('new3', 'tl3')] }];
    const err = await refusal(claimTenants(answeringLate(db, 'tl2', LATE_MS, BUDGET_MS), groups, BUDGET_MS));
    assert.equal((await row(t.url, 'new3'))?.state, 'in_flight', 'the call claimed the other tenant\'s new key');
    assert.equal(err.maybeApplied, true);
  });

  test('the call of several tenants inserted nothing and the other tenant only found its key held, then a takeover could not be sent: not marked', async () => {
    await claimTenant(db, 'tl10', [req('held10', 'tl10')]); // in flight for another request
    const groups = [{ tenantId: 'tl9', items: [await expired('tl9', 'old9')] }, { tenantId: 'tl10', items: [req('held10', 'tl10')] }];
    const err = await refusal(claimTenants(answeringLate(db, 'tl9', LATE_MS, BUDGET_MS), groups, BUDGET_MS));
    assert.equal(err.maybeApplied, false, 'no key was taken');
  });

  test('a lone read found an expired key and its takeover could not be sent: nothing was taken, not marked', async () => {
    const c = await expired('tl4', 'old4');
    const err = await refusal(claimLone(answeringLate(db, 'tl4', LATE_MS, BUDGET_MS), 'tl4', c, BUDGET_MS));
    assert.equal(err.maybeApplied, false, 'nothing was sent that could have taken a key');
  });

  test('claims side by side in one batch: one tenant\'s fails unsent after another\'s claimed its key: every request\'s error is marked', async () => {
    const store = new KeyStore(answeringLate(db, 'tl5', LATE_MS, BUDGET_MS), { crossTenantBatches: false });
    const old = await expired('tl5', 'old5');
    // Submitted in the same turn: one batch, a statement per tenant.
    const [fresh, failed] = await Promise.all([refusal(store.claim(req('new6', 'tl6'))), refusal(store.claim(old))]);
    assert.equal((await row(t.url, 'new6'))?.state, 'in_flight', 'the other tenant\'s claim took its key');
    assert.equal(fresh.maybeApplied, true, 'the request whose key was claimed must give it back');
    assert.equal(failed.maybeApplied, true);
  });

  test('claims side by side in one batch: one fails unsent while the other only found its key held: nothing was taken, not marked', async () => {
    const store = new KeyStore(answeringLate(db, 'tl7', LATE_MS, BUDGET_MS), { crossTenantBatches: false });
    const old = await expired('tl7', 'old7');
    await claimTenant(db, 'tl8', [req('held8', 'tl8')]); // in flight for another request
    const [held, failed] = await Promise.all([store.claim(req('held8', 'tl8')).then(() => null, (e: unknown) => e), refusal(store.claim(old))]);
    assert.ok(held instanceof StoreUnavailableError, `the batch fails as a whole: ${String(held)}`);
    assert.equal(held.maybeApplied, false);
    assert.equal(failed.maybeApplied, false);
  });
});

// The same gap when PostgreSQL itself refuses the takeover (an SQL error, not an outage: here a trigger in this
// test's own database raises deadlock_detected on the expired key's update, as PostgreSQL does when it breaks a
// deadlock). With keys taken, the failure is a ClaimFailedError (its requests give their claims back); without,
// it is the error as it came.

describe('a claim whose takeover PostgreSQL refuses', () => {
  const refusing = (key: string, fn: () => Promise<void>): Promise<void> =>
    whileRefusing(t.url, { code: '40P01', when: `OLD.idem_key = '${key}'` }, fn);

  test('after the call inserted a new key: a ClaimFailedError, its cause PostgreSQL\'s error', async () => {
    const items = [await expired('tr1', 'old-r1'), req('new-r1', 'tr1')];
    await refusing('old-r1', async () => {
      const err = await claimTenant(db, 'tr1', items).then(() => null, (e: unknown) => e);
      assert.ok(err instanceof ClaimFailedError, `rejected with ${String(err)}`);
      assert.equal((err.cause as { code?: string }).code, '40P01');
      assert.ok(claimMayHaveTaken(err));
    });
    assert.equal((await row(t.url, 'new-r1'))?.state, 'in_flight', 'the call claimed the new key before the takeover failed');
  });

  test('nothing taken (a lone key found expired): PostgreSQL\'s error as it came', async () => {
    const c = await expired('tr2', 'old-r2');
    await refusing('old-r2', async () => {
      const err = await claimTenant(db, 'tr2', [c]).then(() => null, (e: unknown) => e);
      assert.equal((err as { code?: string } | null)?.code, '40P01', `rejected with ${String(err)}`);
      assert.equal(claimMayHaveTaken(err), false);
    });
  });

  test('side by side, the failing tenant\'s own call inserted a key: one ClaimFailedError for every request, PostgreSQL\'s error its cause (not wrapped twice)', async () => {
    const store = new KeyStore(db, { crossTenantBatches: false });
    const old = await expired('tr3', 'old-r3');
    await refusing('old-r3', async () => {
      // Submitted in the same turn: one batch, a statement per tenant; tr3's call inserts new-r3, then its takeover is refused.
      const errs = await Promise.all([store.claim(old), store.claim(req('new-r3', 'tr3')), store.claim(req('new-r4', 'tr4'))]
        .map((p) => p.then(() => null, (e: unknown) => e)));
      for (const err of errs) {
        assert.ok(err instanceof ClaimFailedError, `rejected with ${String(err)}`);
        assert.equal((err.cause as { code?: string }).code, '40P01', `its cause: ${String(err.cause)}`);
      }
    });
  });
});

// A lone commit is two statements when the first writes nothing: the update, then the read of whether the key is
// already complete under the same token (an earlier try of this commit that applied). Both share one bound, as a
// claim's statements do: the read gets what the update left of it. Given the whole bound again, a commit attempt
// could take twice its store.timeout.

describe('a lone commit\'s second statement gets what its first left of the bound', () => {
  test('the update answered late, after the whole bound: the read of the kept row is refused unsent', async () => {
    const response = { status: 201, headers: [] as Array<[string, string]>, body: Buffer.from('{}'), bodyRetained: true, bodySize: 2 };
    const c = req('kc1', 'tc1');
    const [claimed] = await claimTenant(db, 'tc1', [c]);
    assert.equal(claimed!.claimed, true);
    const commit = { tenantId: 'tc1', key: 'kc1', ownerToken: c.ownerToken, response };
    const store = new KeyStore(db);
    const first = await store.commit(commit);
    assert.equal(first.committed && !first.kept, true, `the first try wrote the record: ${JSON.stringify(first)}`);
    // Tried again (the first try's answer lost, say): in time, the read says it is already complete under this token.
    const again = await store.commit(commit);
    assert.equal(again.committed && again.kept, true, JSON.stringify(again));
    const late = new KeyStore(answeringLate(db, 'tc1', LATE_MS, BUDGET_MS));
    const err = await refusal(late.commit(commit));
    assert.match(err.message, /spent before this statement was sent/, 'the read was sent with a bound of its own');
    assert.equal((await row(t.url, 'kc1'))?.state, 'complete', 'the stored record is left as it was');
  });
});
