import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db } from '../../src/store/db/port.js';
import { KeyStore } from '../../src/store/key-store.js';
import type { ClaimRequest } from '../../src/store/records.js';
import { createTestDatabase, lockWaiters, type TestDatabase } from '../helpers/db.js';
import { waitFor } from '../helpers/wait.js';

// Found by the model test: two retries of a crashed request racing on two
// instances. The claim that loses the row lock re-checks the row as the
// winner left it, but reads it back from its own, older snapshot — where the
// lease has simply run out. That stale row must never be the answer: on an
// onExpiredLease: fail route the key is outcome_unknown now, not in flight.
// The race is made deterministic by holding the row lock while both claims
// start, then letting go.

const FP = Buffer.alloc(32, 7);

describe('two claims racing on an expired lease', () => {
  let t: TestDatabase;
  let dbA: Db;
  let dbB: Db;
  let locker: pg.Client;
  before(async () => {
    t = await createTestDatabase();
    dbA = createPgDb({ connectionString: t.url, max: 1 });
    dbB = createPgDb({ connectionString: t.url, max: 1 });
    locker = new pg.Client({ connectionString: t.url });
    await locker.connect();
  });
  after(async () => {
    await locker?.end();
    await dbA?.close();
    await dbB?.close();
    await t?.drop();
  });

  const req = (key: string, onExpiredLease: 'reexecute' | 'fail'): ClaimRequest => ({
    tenantId: 't', key, fingerprint: FP, ownerToken: randomUUID(), leaseMs: 60_000, ttlMs: 3_600_000,
    onExpiredLease, route: 'r', method: 'POST', path: '/x',
  });

  /** A crashed owner's row (lease over), then two claims that both start while its lock is held. */
  async function race(key: string, policy: 'reexecute' | 'fail'): Promise<string[]> {
    const a = new KeyStore(dbA);
    const b = new KeyStore(dbB);
    assert.equal((await a.claim(req(key, policy))).kind, 'claimed');
    await locker.query(`UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE idem_key = $1`, [key]);
    await locker.query('BEGIN');
    await locker.query('SELECT 1 FROM idempotency_keys WHERE idem_key = $1 FOR UPDATE', [key]);
    const both = Promise.all([a.claim(req(key, policy)), b.claim(req(key, policy))]);
    // Both statements are now waiting for the row lock, with their snapshots taken.
    await waitForLockWaiters(key, 2);
    await locker.query('COMMIT');
    return (await both).map((o) => o.kind).sort();
  }

  async function waitForLockWaiters(key: string, n: number): Promise<void> {
    await waitFor(`the two claims to wait on the lock of ${key}`, async () => (await lockWaiters(t.url)) >= n, 5000, 10);
  }

  test('onExpiredLease: fail — both get outcome_unknown, never a stale in-flight', async () => {
    assert.deepEqual(await race('race-fail', 'fail'), ['outcome_unknown', 'outcome_unknown']);
  });

  test('onExpiredLease: reexecute — exactly one takes over, the other sees it in flight', async () => {
    assert.deepEqual(await race('race-re', 'reexecute'), ['claimed', 'in_flight']);
  });
});
