import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { KeyStore } from '../../src/store/key-store.js';
import type { ClaimRequest } from '../../src/store/records.js';
import type { Db } from '../../src/store/db/port.js';
import { openBackend, type Backend } from '../helpers/db.js';
import { citusNodes } from '../helpers/citus.js';
import { sleep } from '../helpers/wait.js';

// The store's side of onExpiredLease: probe, on every backend (and on Citus
// under `npm run test:citus`): migration 3 lets a row store `probe`; a lease
// that ran out on such a row is taken over in flight (attempt + 1), as on
// reexecute; the taker marks it outcome_unknown (fenced by its owner token),
// after which every claim answers outcome_unknown.

const fp = createHash('sha256').update('body').digest();
const claimReq = (key: string, over: Partial<ClaimRequest> = {}): ClaimRequest => ({
  tenantId: 't1', key, fingerprint: fp, ownerToken: randomUUID(), leaseMs: 150, ttlMs: 3_600_000,
  onExpiredLease: 'probe', route: 'r', method: 'POST', path: '/p', ...over,
});

const backends: Backend[] = citusNodes === null ? ['postgres', 'pglite', 'pgbouncer'] : ['postgres'];

for (const backend of backends) {
  describe(`onExpiredLease: probe in the key store on ${citusNodes === null ? backend : 'Citus'}`, () => {
    let db: Db;
    let close: () => Promise<void>;
    let store: KeyStore;
    before(async () => {
      ({ db, close } = await openBackend(backend));
      store = new KeyStore(db);
    });
    after(async () => close());

    test('a probe row is taken over in flight after its lease; the taker marks it outcome_unknown; a stale owner cannot', async () => {
      const first = claimReq('k-probe');
      assert.deepEqual(await store.claim(first), { kind: 'claimed', attempt: 1 });
      assert.equal((await store.get('t1', 'k-probe'))?.onExpiredLease, 'probe');
      assert.equal((await store.claim(claimReq('k-probe'))).kind, 'in_flight', 'lease live: nobody takes it over');
      await sleep(250);
      const taker = claimReq('k-probe');
      assert.deepEqual(await store.claim(taker), { kind: 'claimed', attempt: 2 }, 'taken over, to be probed');
      assert.equal(await store.markUnknown('t1', 'k-probe', first.ownerToken), false, 'fenced: the crashed holder\'s token');
      assert.equal(await store.markUnknown('t1', 'k-probe', taker.ownerToken), true);
      const rec = await store.get('t1', 'k-probe');
      assert.equal(rec?.state, 'outcome_unknown');
      assert.equal(rec?.lockedUntil, null);
      assert.equal(await store.extend('t1', 'k-probe', taker.ownerToken, 1000), false, 'no lease left to extend');
      await sleep(250);
      assert.deepEqual(await store.claim(claimReq('k-probe')), { kind: 'outcome_unknown' });
      assert.equal(await store.markUnknown('t1', 'k-probe', taker.ownerToken), false, 'only a row in flight');
    });

    test('the taker commits the probe\'s answer: a replay from then on', async () => {
      await store.claim(claimReq('k-found'));
      await sleep(250);
      const taker = claimReq('k-found');
      assert.deepEqual(await store.claim(taker), { kind: 'claimed', attempt: 2 });
      const response = { status: 200, headers: [['content-type', 'application/json']] as Array<[string, string]>, body: Buffer.from('{"id":"o1"}'), bodyRetained: true, bodySize: 11 };
      assert.equal((await store.commit({ tenantId: 't1', key: 'k-found', ownerToken: taker.ownerToken, response })).committed, true);
      const replay = await store.claim(claimReq('k-found'));
      assert.ok(replay.kind === 'complete');
      assert.equal(replay.response.body.toString(), '{"id":"o1"}');
    });

    test('the constraint still refuses a value no route can have', async () => {
      await assert.rejects(store.claim(claimReq('k-bad', { onExpiredLease: 'sometimes' as ClaimRequest['onExpiredLease'] })), /on_expired_lease_check/);
    });
  });
}
