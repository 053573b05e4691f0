import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db } from '../../src/store/db/port.js';
import { KeyStore } from '../../src/store/key-store.js';
import type { ClaimRequest } from '../../src/store/records.js';
import { claimStatement } from '../../src/store/sql/claim.js';
import { createTestDatabase, lockWaiters, type TestDatabase } from '../helpers/db.js';
import { waitFor } from '../helpers/wait.js';

// The claim is one call (migration 4): insert the new keys, then read the
// rows of the keys the insert left alone. The edge of that order: a claim of
// a key whose row another transaction inserted and commits while the insert
// waits. The insert then leaves the key alone, and the row it met was
// committed after the call started. A single statement would read it with
// the snapshot it started with, find nothing, and the store would have to
// claim again; the call's read is its own statement with a snapshot of its
// own, so it sees the row: one call answers.

const fingerprint = Buffer.alloc(32, 7);
const req = (key: string): ClaimRequest => ({
  tenantId: 't-race', key, fingerprint, ownerToken: randomUUID(), leaseMs: 60_000, ttlMs: 3_600_000,
  onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/p',
});

describe('the claim call against a concurrent insert of the same key', () => {
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
