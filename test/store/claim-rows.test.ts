import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db } from '../../src/store/db/port.js';
import type { ClaimRequest } from '../../src/store/records.js';
import { claimLone, claimTenant, claimTenants, type ClaimRow } from '../../src/store/tenant-claim.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

// Every claim row the store hands on has the same fields in the same order,
// whichever statement it came from (the claim call, the lone read and insert,
// the call of several tenants) and whether the key was inserted or found:
// the precondition for one hidden class in V8, so the field reads of
// src/store/key-store.ts (rawFromRow, decide, toStored) stay monomorphic.
// Spreads of node-postgres's rows carried each statement's own columns in
// its own order, and every replay paid for megamorphic reads (src/store/
// tenant-claim.ts, claimRow; docs/operations.md, Tracing: cost, 2026-12-04).

const FIELDS = [
  'claimed', 'claim_attempt', 'state', 'fingerprint', 'status_code', 'response_headers', 'response_body',
  'body_retained', 'body_size', 'retry_after_s', 'ttl_left_ms', 'lease_over', 'trace_context',
];

const fingerprint = Buffer.alloc(32, 3);
const req = (tenantId: string, key: string): ClaimRequest => ({
  tenantId, key, fingerprint, ownerToken: randomUUID(), leaseMs: 60_000, ttlMs: 3_600_000,
  onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/p',
});

describe('claim rows: one shape from every statement', () => {
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

  test('inserted and found rows of the claim call, the lone statements and the call of several tenants have the same fields in the same order', async () => {
    const rows: Array<[string, ClaimRow]> = [];
    const [inserted] = await claimTenant(db, 'ta', [req('ta', 'k1')]);
    rows.push(['claim call, inserted', inserted!]);
    const [found] = await claimTenant(db, 'ta', [req('ta', 'k1')]);
    rows.push(['claim call, found in flight', found!]);
    rows.push(['lone insert', await claimLone(db, 'ta', req('ta', 'k2'))]);
    rows.push(['lone read, found in flight', await claimLone(db, 'ta', req('ta', 'k2'))]);
    const groups = (key: string) => [{ tenantId: 'ta', items: [req('ta', key)] }, { tenantId: 'tb', items: [req('tb', key)] }];
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
