import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db } from '../../src/store/db/port.js';
import { KeyStore } from '../../src/store/key-store.js';
import type { ClaimRequest } from '../../src/store/records.js';
import { TRACE_RECORD_HEADER } from '../../src/proxy/headers.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';

// Migration 8 (docs/storage.md, Migrations) gives the trace context a column
// and the claim new functions (idempotency_claim_v2 …) that return it; the old
// ones stay, so that an instance of an earlier version, still running during a
// rolling upgrade, keeps working on the migrated table: it claims through
// idempotency_claim and commits without trace_context, its traced records
// keeping the trace context as the reserved last header. Both kinds of
// instance then answer each other's keys.

const TP = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
const fingerprint = Buffer.alloc(32, 3);
const req = (key: string): ClaimRequest => ({
  tenantId: 't-up', key, fingerprint, ownerToken: randomUUID(), leaseMs: 60_000, ttlMs: 3_600_000,
  onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/p',
});

/** The claim as an instance before migration 8 calls it (statement idem_claim_v3). */
const oldClaim = (url: string, c: ClaimRequest) => sql<Record<string, unknown>>(url,
  `SELECT * FROM idempotency_claim($1::text, $2::text[], $3::text[], $4::uuid[], $5::float8[], $6::float8[], $7::text[], $8::text[], $9::text[], $10::text[])`,
  [c.tenantId, [c.key], [c.fingerprint.toString('hex')], [c.ownerToken], [c.leaseMs], [c.ttlMs], [c.onExpiredLease], [c.route], [c.method], [c.path]]);

/** Its lone commit (idem_commit_one_v5): no trace_context; a traced record's trace context as the last header. */
const oldCommit = (url: string, c: ClaimRequest, headers: Array<[string, string]>) => sql(url,
  `UPDATE idempotency_keys
      SET state = 'complete', status_code = 201, response_headers = $4::jsonb, response_body = decode('7b7d', 'hex'),
          body_retained = true, body_size = 2, completed_at = now(), locked_until = NULL
    WHERE tenant_id = $1 AND idem_key = $2 AND owner_token = $3::uuid AND state = 'in_flight'
   RETURNING idem_key`, [c.tenantId, c.key, c.ownerToken, JSON.stringify(headers)]);

describe('a rolling upgrade across migration 8: an instance of the earlier version beside a current one', () => {
  let t: TestDatabase;
  let db: Db;
  let store: KeyStore;
  before(async () => {
    t = await createTestDatabase();
    db = createPgDb({ connectionString: t.url, max: 2 });
    store = new KeyStore(db);
  });
  after(async () => {
    await db?.close();
    await t?.drop();
  });

  test("the earlier instance's record (trace context in its headers) is complete for the current one, with the entry kept for the link", async () => {
    const c = req('k-old');
    const [claimed] = await oldClaim(t.url, c);
    assert.equal(claimed!.inserted, true);
    assert.ok(!('trace_context' in claimed!), 'the old function returns the columns it always did');
    assert.equal((await oldCommit(t.url, c, [['content-type', 'application/json'], [TRACE_RECORD_HEADER, TP]])).length, 1);
    const found = await store.claim(req('k-old'));
    assert.equal(found.kind, 'complete', JSON.stringify(found));
    if (found.kind !== 'complete') return;
    assert.equal(found.response.status, 201);
    assert.equal(found.response.trace, null);
    assert.deepEqual(found.response.headers, [['content-type', 'application/json'], [TRACE_RECORD_HEADER, TP]]);
  });

  test("the current instance's record (trace context in its column) is complete for the earlier one, which replays its headers", async () => {
    const c = req('k-new');
    assert.equal((await store.claim(c)).kind, 'claimed');
    const response = { status: 201, headers: [['content-type', 'application/json']] as Array<[string, string]>, body: Buffer.from('{}'), bodyRetained: true, bodySize: 2, trace: TP };
    assert.equal((await store.commit({ tenantId: c.tenantId, key: c.key, ownerToken: c.ownerToken, response })).committed, true);
    const [row] = await sql<{ trace_context: string | null }>(t.url, 'SELECT trace_context FROM idempotency_keys WHERE idem_key = $1', ['k-new']);
    assert.equal(row!.trace_context, TP);
    const [seen] = await oldClaim(t.url, req('k-new'));
    assert.equal(seen!.state, 'complete');
    assert.equal(seen!.status_code, 201);
    assert.deepEqual(seen!.response_headers, [['content-type', 'application/json']]);
  });

  test('a takeover by the current instance clears the trace context of the execution before', async () => {
    const c = req('k-expired');
    assert.equal((await store.claim({ ...c, ttlMs: 1 })).kind, 'claimed');
    const response = { status: 200, headers: [] as Array<[string, string]>, body: Buffer.alloc(0), bodyRetained: true, bodySize: 0, trace: TP };
    assert.equal((await store.commit({ tenantId: c.tenantId, key: c.key, ownerToken: c.ownerToken, response })).committed, true);
    await sql(t.url, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE idem_key = 'k-expired'`);
    assert.equal((await store.claim(req('k-expired'))).kind, 'claimed');
    const [row] = await sql<{ state: string; trace_context: string | null }>(t.url, 'SELECT state, trace_context FROM idempotency_keys WHERE idem_key = $1', ['k-expired']);
    assert.deepEqual(row, { state: 'in_flight', trace_context: null });
  });
});
