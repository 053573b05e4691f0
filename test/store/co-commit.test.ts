import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import pg from 'pg';
import { KeyStore } from '../../src/store/key-store.js';
import { sweepOnce } from '../../src/store/sweeper.js';
import { claimToken } from '../../src/store/claim-token.js';
import { extendStatement } from '../../src/store/sql/extend.js';
import type { ClaimRequest } from '../../src/store/records.js';
import type { Db, Queryable } from '../../src/store/db/port.js';
import { HOP_BY_HOP, NEVER_STORED, PER_REQUEST_IDS, compileStoredHeaders } from '../../src/proxy/headers.js';
import { settle, step } from '../../src/upstream/index.js';
import { lockWaiters, openBackend, type Backend } from '../helpers/db.js';
import { waitFor } from '../helpers/wait.js';

// idempotency_settle and idempotency_step (migration 2, docs/co-commit.md,
// docs/chain.md) against the key store, on PostgreSQL and on the embedded
// store: a settled row is complete for the claim path and replays as a
// proxy-committed one would; fencing by owner token; a rollback undoes it;
// the proxy's own commit keeps the settled record.

const fp = (s: string) => createHash('sha256').update(s).digest();
const claimReq = (key: string, over: Partial<ClaimRequest> = {}): ClaimRequest => ({
  tenantId: 't1', key, fingerprint: fp('body'), ownerToken: randomUUID(), leaseMs: 60_000, ttlMs: 3_600_000,
  onExpiredLease: 'reexecute', route: 'r', method: 'POST', path: '/p', ...over,
});
const tokenOf = (c: ClaimRequest): string => claimToken(c.tenantId, c.key, c.ownerToken);
const SETTLE = 'SELECT idempotency_settle($1, $2, $3::jsonb, $4) AS settled';

for (const backend of ['postgres', 'pglite'] as Backend[]) {
  describe(`idempotency_settle and idempotency_step on ${backend}`, () => {
    let db: Db;
    let url: string | null;
    let close: () => Promise<void>;
    let store: KeyStore;
    const q = <R = Record<string, unknown>>(on: Queryable, text: string, values: unknown[] = []) => on.query<R>({ name: '', text }, values);
    const settleOn = async (on: Queryable, token: string, status = 201, headers: unknown = { 'content-type': ['application/json'] }, body: Buffer | null = Buffer.from('{"id":"ord_1"}')) =>
      (await q<{ settled: boolean }>(on, SETTLE, [token, status, JSON.stringify(headers), body]))[0]!.settled;
    const errorOf = async (fn: () => Promise<unknown>): Promise<{ code?: string; message: string }> => {
      try {
        await fn();
      } catch (err) {
        return err as { code?: string; message: string };
      }
      assert.fail('expected an error');
    };

    before(async () => {
      ({ db, url, close } = await openBackend(backend));
      store = new KeyStore(db);
    });
    after(async () => close());

    test('a settled row is complete for the claim path, and replays as the proxy\'s own commit of the same response does', async () => {
      const c = claimReq('s-basic');
      await store.claim(c);
      const body = Buffer.from([0x7b, 0x7d, 0, 255]);
      const headers = { 'Content-Type': ['application/json'], 'x-tag': ['a', 'b'], link: '</a>; rel=a' };
      assert.equal(await settleOn(db, tokenOf(c), 201, headers, body), true);
      const settled = await store.claim(claimReq('s-basic'));
      assert.equal(settled.kind, 'complete');

      const d = claimReq('s-committed');
      await store.claim(d);
      const stored = settled.kind === 'complete' ? settled.response : null;
      await store.commit({ tenantId: 't1', key: 's-committed', ownerToken: d.ownerToken, response: stored! });
      const committed = await store.claim(claimReq('s-committed'));
      assert.deepEqual(settled, { ...committed, ttlLeftMs: (settled as { ttlLeftMs: number }).ttlLeftMs });
      assert.deepEqual(stored, {
        status: 201,
        headers: [['link', '</a>; rel=a'], ['x-tag', 'a'], ['x-tag', 'b'], ['content-type', 'application/json']],
        body,
        bodyRetained: true,
        bodySize: 4,
        trace: null, // settled by the upstream: no trace context of the proxy's
      });
    });

    test('the headers the proxy never stores are not stored by a settle either (the same list)', async () => {
      const names = [...HOP_BY_HOP, ...NEVER_STORED, ...PER_REQUEST_IDS, 'content-type', 'etag', 'location', 'x-custom'];
      const c = claimReq('s-never');
      await store.claim(c);
      assert.equal(await settleOn(db, tokenOf(c), 200, Object.fromEntries(names.map((n) => [n, ['v']])), null), true);
      const rec = await store.get('t1', 's-never', true);
      const keep = compileStoredHeaders([], []);
      assert.deepEqual(new Set(rec!.responseHeaders!.map(([n]) => n)), new Set(names.filter(keep)));
      assert.equal(rec!.responseBody!.length, 0);
    });

    test('fencing: after a takeover the old claim settles nothing; the new owner\'s does', async () => {
      const old = claimReq('s-fenced', { leaseMs: 1 });
      await store.claim(old);
      await new Promise((r) => setTimeout(r, 20));
      const next = claimReq('s-fenced');
      assert.deepEqual(await store.claim(next), { kind: 'claimed', attempt: 2 });
      assert.equal(await settleOn(db, tokenOf(old)), false);
      const rec = await store.get('t1', 's-fenced');
      assert.deepEqual([rec!.state, rec!.statusCode], ['in_flight', null], 'the fenced settle changed nothing');
      assert.equal(await settleOn(db, tokenOf(next)), true);
      assert.equal(await settleOn(db, tokenOf(next)), false, 'settled once: not in flight any more');
      assert.equal(await settleOn(db, claimToken('t1', 'no-such-key', randomUUID())), false);
    });

    test('a transaction that rolls back after settling leaves the row in flight', async () => {
      const c = claimReq('s-rollback');
      await store.claim(c);
      await assert.rejects(db.transaction(async (tx) => {
        assert.equal(await settleOn(tx, tokenOf(c)), true);
        throw new Error('business failure');
      }), /business failure/);
      assert.equal((await store.get('t1', 's-rollback'))!.state, 'in_flight');
      assert.equal((await store.claim(claimReq('s-rollback'))).kind, 'in_flight');
    });

    test('the proxy\'s commit of a settled row reports success and keeps the settled record', async () => {
      const c = claimReq('s-commit-after');
      await store.claim(c);
      assert.equal(await settleOn(db, tokenOf(c), 201, {}, Buffer.from('settled')), true);
      const proxyCopy = { status: 200, headers: [['x-proxy', '1']] as Array<[string, string]>, body: Buffer.from('proxy'), bodyRetained: true, bodySize: 5 };
      const out = await store.commit({ tenantId: 't1', key: 's-commit-after', ownerToken: c.ownerToken, response: proxyCopy });
      assert.equal(out.committed, true);
      assert.equal(out.committed && out.kept, true);
      const rec = await store.get('t1', 's-commit-after', true);
      assert.deepEqual([rec!.statusCode, rec!.responseBody!.toString(), rec!.responseHeaders], [201, 'settled', []]);

      // Batched with a row the proxy commits itself: each gets its own answer.
      const a = claimReq('s-batch-a');
      const b = claimReq('s-batch-b');
      await store.claim(a);
      await store.claim(b);
      assert.equal(await settleOn(db, tokenOf(a), 202, {}, Buffer.from('a')), true);
      const [ra, rb] = await Promise.all([
        store.commit({ tenantId: 't1', key: 's-batch-a', ownerToken: a.ownerToken, response: proxyCopy }),
        store.commit({ tenantId: 't1', key: 's-batch-b', ownerToken: b.ownerToken, response: proxyCopy }),
      ]);
      assert.deepEqual([ra!.committed && ra!.kept, rb!.committed && rb!.kept], [true, false]);
      assert.equal((await store.get('t1', 's-batch-a', true))!.responseBody!.toString(), 'a');
      assert.equal((await store.get('t1', 's-batch-b', true))!.responseBody!.toString(), 'proxy');
    });

    test('malformed tokens, statuses and headers raise a clear error (22023)', async () => {
      const c = claimReq('s-bad');
      await store.claim(c);
      const good = tokenOf(c);
      for (const bad of ['', 'x', 'v2.dDE.aw.00000000-0000-4000-8000-000000000000', `${good}.x`, good.replace(/.{4}$/, 'zzzz'), 'v1.d!E.aw.00000000-0000-4000-8000-000000000000', null]) {
        const e = await errorOf(() => settleOn(db, bad as string));
        assert.equal(e.code, '22023', String(bad));
        assert.match(e.message, /not an Idempotency-Claim token/);
      }
      const cases: Array<[number | null, unknown, RegExp]> = [
        [199, {}, /status must be a final HTTP status/],
        [600, {}, /status must be a final HTTP status/],
        [null, {}, /status must be a final HTTP status \(200-599\), got NULL/],
        [201, ['content-type'], /headers must be a JSON object/],
        [201, { 'bad name': ['x'] }, /header name "bad name" is not an HTTP field name/],
        [201, { 'x-a': [1] }, /header "x-a" must map to an array of strings/],
        [201, { 'x-a': { v: 1 } }, /header "x-a" must map to an array of strings/],
        [201, { 'x-a': ['a\r\nInjected: 1'] }, /a value of header "x-a" holds a control character/],
        [201, { 'x-a': ['€'] }, /outside Latin-1/],
      ];
      for (const [status, headers, msg] of cases) {
        const e = await errorOf(() => settleOn(db, good, status as number, headers, null));
        assert.equal(e.code, '22023', msg.source);
        assert.match(e.message, msg);
      }
      assert.equal((await store.get('t1', 's-bad'))!.state, 'in_flight', 'nothing was settled by a bad call');
    });

    test('the token names the row for any tenant and key: empty tenant, non-ASCII tenant, long key', async () => {
      for (const [tenant, key] of [['', 'k'], ['tenänt ✓', 'k/ä'], [`sha256:${'a'.repeat(64)}`, 'x'.repeat(255)]] as const) {
        const c = claimReq(key, { tenantId: tenant });
        assert.deepEqual(await store.claim(c), { kind: 'claimed', attempt: 1 });
        assert.equal(await settleOn(db, tokenOf(c)), true, `${tenant} / ${key}`);
        assert.equal((await store.get(tenant, key))!.state, 'complete');
      }
    });

    test('idempotency_step: true the first time, false after; a rollback undoes the marker; an expired marker counts as absent and is swept', async () => {
      const stepOn = async (on: Queryable, key: string, ttl = '1 day') =>
        (await q<{ first: boolean }>(on, 'SELECT idempotency_step($1, $2, $3::interval) AS first', ['orders', key, ttl]))[0]!.first;
      assert.equal(await stepOn(db, 'm1'), true);
      assert.equal(await stepOn(db, 'm1'), false);
      assert.equal(await stepOn(db, 'm1', '24h'), false);
      await assert.rejects(db.transaction(async (tx) => {
        assert.equal(await stepOn(tx, 'm2'), true);
        throw new Error('worker crashed');
      }));
      assert.equal(await stepOn(db, 'm2'), true, 'the rolled-back step is undone: the redelivery does it');
      await q(db, `UPDATE idempotency_steps SET expires_at = now() - interval '1 second' WHERE step_key = 'm1'`);
      assert.equal(await stepOn(db, 'm1'), true, 'past its retention the marker is gone');
      await q(db, `INSERT INTO idempotency_steps (scope, step_key, expires_at) VALUES ('old', 'a', now() - interval '1 minute'), ('old', 'b', now() - interval '1 minute')`);
      const swept = await sweepOnce(db, 1000);
      assert.equal(swept.steps, 2);
      assert.deepEqual(await q(db, `SELECT step_key FROM idempotency_steps WHERE scope = 'old'`), []);
      for (const [ttl, msg] of [['0', /ttl must be a positive interval/], ['-1 day', /ttl must be a positive interval/]] as const) {
        const e = await errorOf(() => stepOn(db, 'm3', ttl));
        assert.equal(e.code, '22023');
        assert.match(e.message, msg);
      }
      const e = await errorOf(() => q(db, 'SELECT idempotency_step(NULL, $1, $2::interval)', ['k', '1 day']));
      assert.match(e.message, /scope and key must not be NULL/);
    });

    if (backend === 'postgres') {
      // The upstream answered before its transaction ended: the proxy's commit
      // waits on the settle's row lock. The row lock gives the commit the row
      // as that transaction left it: complete (kept, not written) once it
      // commits, in flight (written) once it rolls back. Lone and batched.
      test('a commit that waits on a settle still in its transaction: kept when it commits, written when it rolls back', async () => {
        const proxyCopy = { status: 200, headers: [] as Array<[string, string]>, body: Buffer.from('proxy'), bodyRetained: true, bodySize: 5 };
        for (const [label, end] of [['commit', 'COMMIT'], ['rollback', 'ROLLBACK']] as const) {
          for (const batched of [false, true]) {
            const c = claimReq(`s-wait-${label}-${batched}`);
            const other = claimReq(`s-wait-${label}-${batched}-other`);
            await store.claim(c);
            if (batched) await store.claim(other);
            const upstream = new pg.Client({ connectionString: url! });
            await upstream.connect();
            const tx: Queryable = { query: async <R>(stmt: { text: string }, values: readonly unknown[]) => (await upstream.query(stmt.text, values as unknown[])).rows as R[] };
            try {
              await upstream.query('BEGIN');
              assert.equal(await settleOn(tx, tokenOf(c), 201, {}, Buffer.from('settled')), true);
              const commits = Promise.all([c, ...(batched ? [other] : [])].map((r) =>
                store.commit({ tenantId: 't1', key: r.key, ownerToken: r.ownerToken, response: proxyCopy })));
              await waitFor('the proxy\'s commit waiting on the settle\'s row lock', async () => (await lockWaiters(url!)) === 1, 10_000, 20);
              await upstream.query(end);
              const [out] = await commits;
              assert.equal(out!.committed, true, `${label}, batched ${batched}: committed`);
              assert.equal(out!.committed && out!.kept, end === 'COMMIT', `${label}, batched ${batched}: kept only if the settle committed`);
              const rec = await store.get('t1', c.key, true);
              assert.equal(rec!.responseBody!.toString(), end === 'COMMIT' ? 'settled' : 'proxy', `${label}, batched ${batched}: the record`);
            } finally {
              await upstream.end();
            }
          }
        }
      });

      // The lease heartbeat (extend) wrote a new version of the row, still in
      // flight under the same owner, after the commit's snapshot: the commit
      // waits on its row lock and must then write that latest version — a
      // commit that wrote nothing here would leave the key to be run again
      // once its lease ran out. Lone and batched.
      test('a commit that waits on a lease heartbeat still in its transaction writes the response once the heartbeat commits', async () => {
        const proxyCopy = { status: 200, headers: [] as Array<[string, string]>, body: Buffer.from('proxy'), bodyRetained: true, bodySize: 5 };
        for (const batched of [false, true]) {
          const c = claimReq(`hb-wait-${batched}`);
          const other = claimReq(`hb-wait-${batched}-other`);
          await store.claim(c);
          if (batched) await store.claim(other);
          const heartbeat = new pg.Client({ connectionString: url! });
          await heartbeat.connect();
          try {
            await heartbeat.query('BEGIN');
            const extended = await heartbeat.query(extendStatement.text, ['t1', c.key, c.ownerToken, 120_000]);
            assert.equal(extended.rowCount, 1);
            const commits = Promise.all([c, ...(batched ? [other] : [])].map((r) =>
              store.commit({ tenantId: 't1', key: r.key, ownerToken: r.ownerToken, response: proxyCopy })));
            await waitFor('the proxy\'s commit waiting on the heartbeat\'s row lock', async () => (await lockWaiters(url!)) === 1, 10_000, 20);
            await heartbeat.query('COMMIT');
            const [out] = await commits;
            assert.equal(out!.committed, true, `batched ${batched}: committed`);
            assert.equal(out!.committed && out!.kept, false, `batched ${batched}: written, not kept`);
            const rec = await store.get('t1', c.key, true);
            assert.equal(rec!.state, 'complete', `batched ${batched}: the row is complete`);
            assert.equal(rec!.responseBody!.toString(), 'proxy', `batched ${batched}: the record is the proxy's`);
          } finally {
            await heartbeat.end();
          }
        }
      });

      test('idempotency-proxy/upstream on a pg.Client: settle() from the request header, step()', async () => {
        const client = new pg.Client({ connectionString: url! });
        await client.connect();
        try {
          const c = claimReq('s-helper');
          await store.claim(c);
          await client.query('BEGIN');
          const req = { headers: { 'idempotency-claim': tokenOf(c) } };
          assert.equal(await settle(client, req, { status: 201, headers: { 'Content-Type': 'text/plain', 'X-N': 3, 'X-L': ['a', 'b'] }, body: 'hé' }), true);
          assert.equal(await step(client, 'helper', 'one', 60_000), true);
          assert.equal(await step(client, 'helper', 'one', '1 hour'), false);
          await client.query('COMMIT');
          const rec = await store.get('t1', 's-helper', true);
          assert.deepEqual(rec!.responseHeaders, [['x-l', 'a'], ['x-l', 'b'], ['x-n', '3'], ['content-type', 'text/plain']]);
          assert.equal(rec!.responseBody!.toString(), 'hé');
          assert.equal(await settle(client, { headers: {} }, { status: 201 }), null, 'no claim: nothing settled');
          await assert.rejects(step(client, 'helper', 'two', 0), RangeError);
        } finally {
          await client.end();
        }
      });

      test('idempotency_step: two workers on the same message at the same moment, each in its own transaction: the side effect happens once; a rollback lets the other do it', async () => {
        await q(db, 'CREATE TABLE IF NOT EXISTS side_effects (message text NOT NULL, worker int NOT NULL)');
        const worker = async (id: number, message: string, gate: Promise<void>): Promise<boolean> => {
          const client = new pg.Client({ connectionString: url! });
          await client.connect();
          try {
            await client.query('BEGIN');
            await gate;
            const first = await step(client, 'inbox', message, '1 day');
            if (first) await client.query('INSERT INTO side_effects VALUES ($1, $2)', [message, id]);
            await new Promise((r) => setTimeout(r, 100)); // the other worker is waiting on the marker now
            await client.query('COMMIT');
            return first;
          } finally {
            await client.end();
          }
        };
        let open!: () => void;
        const gate = new Promise<void>((r) => { open = r; });
        const both = Promise.all([worker(1, 'msg-1', gate), worker(2, 'msg-1', gate)]);
        open();
        const firsts = await both;
        assert.equal(firsts.filter(Boolean).length, 1, 'one worker did the step');
        assert.equal((await q<{ n: number }>(db, `SELECT count(*)::int AS n FROM side_effects WHERE message = 'msg-1'`))[0]!.n, 1);

        // The first worker rolls back: the other, waiting on its marker, then does the step itself. The other's
        // step is sent once the first has done its own, and the first rolls back only once the other is seen
        // waiting on the marker's lock (not after a fixed head start, which a loaded machine can overrun).
        const w3 = new pg.Client({ connectionString: url!, application_name: 'idempotency-proxy' });
        const w4 = new pg.Client({ connectionString: url!, application_name: 'idempotency-proxy' });
        await Promise.all([w3.connect(), w4.connect()]);
        try {
          await Promise.all([w3.query('BEGIN'), w4.query('BEGIN')]);
          assert.equal(await step(w3, 'inbox', 'msg-2', '1 day'), true, 'the first worker does the step');
          await w3.query('INSERT INTO side_effects VALUES ($1, $2)', ['msg-2', 3]);
          const second = step(w4, 'inbox', 'msg-2', '1 day');
          await waitFor('the second worker waiting on the first one\'s marker', async () => (await lockWaiters(url!)) === 1, 10_000, 20);
          await w3.query('ROLLBACK');
          assert.equal(await second, true, 'after the rollback the waiting worker does the step');
          await w4.query('INSERT INTO side_effects VALUES ($1, $2)', ['msg-2', 4]);
          await w4.query('COMMIT');
        } finally {
          await Promise.all([w3.end(), w4.end()]);
        }
        assert.deepEqual(await q(db, `SELECT worker FROM side_effects WHERE message = 'msg-2'`), [{ worker: 4 }]);
      });
    }
  });
}
