import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, row, sql, whileRefusing, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { holdingAnswers, names, type Hold } from '../helpers/late-answers.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { sleep, waitFor } from '../helpers/wait.js';

// Through a running proxy: a claim that fails after it took a key. Two requests share one claim statement (the
// proxy batches the claims that wait together): a new key, and a key whose holder died with its lease over. The
// statement inserts the new key and finds the other; its answer arrives late, after the whole store.timeout, so
// the takeover of the other is refused unsent. Both requests are answered 503 and run nothing. The new key must
// then be given back (src/lifecycle/give-back.ts): its retry runs at once, exactly once. Left in flight, every
// retry got 409 for the whole lease, and on this `onExpiredLease: fail` route the key then became
// outcome_unknown for an operator, though nothing ran (docs/guarantees.md).
// The same when PostgreSQL itself refuses the takeover (an SQL error): both requests 500, the key given back.

const TIMEOUT_MS = 1500;
const YAML = `
store: { timeout: ${TIMEOUT_MS}ms }
defaults:
  lease: 60s
  tenant: { fromHeader: x-tenant }
routes:
  - name: pay
    match: { path: "/pay/**" }
    onExpiredLease: fail
`;

let db: TestDatabase;
let up: TestUpstream;
let proxy: RunningProxy;
const holds = new Set<Hold>();

before(async () => {
  db = await createTestDatabase();
  up = await startUpstream();
  proxy = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: YAML, start: { wrapDb: (real) => holdingAnswers(real, holds) } });
});
after(async () => {
  await proxy?.close();
  await up?.close();
  await db?.drop();
});

const post = (tenant: string, key: string): Promise<Reply> =>
  send(`${proxy.url}/pay/${key}`, { headers: { 'idempotency-key': key, 'x-tenant': tenant, 'content-type': 'application/json' }, body: '{"amount":100}' });
const executionsOf = (key: string): number => up.received.filter((r) => r.url === `/pay/${key}`).length;

for (const [what, deadTenant] of [['one tenant: one claim call', 't'], ['two tenants: one call of several tenants', 'u']] as const) {
  test(`a batch's claim fails after it inserted a new key (${what}): both requests 503, the new key is given back, its retry runs once`, () => failedBatch(deadTenant, 'late', 503));
}

// The same batch, its takeover failed by PostgreSQL itself instead: an error that is not the store being out of
// reach (here a trigger in this test's own database raises deadlock_detected on the dead key's update, as
// PostgreSQL does when it breaks a deadlock). Both requests are answered 500, and the new key is given back all the same.
test('a batch\'s claim fails after it inserted a new key, its takeover refused by an SQL error: both requests 500, the new key is given back, its retry runs once', async () => {
  const dead = `dead-sql-${Date.now()}`;
  await whileRefusing(db.url, { code: '40P01', when: `OLD.idem_key = '${dead}' AND OLD.state = 'in_flight' AND OLD.locked_until < now()` },
    () => failedBatch('t', 'sql', 500, dead));
});

/**
 * A new key and a dead holder's key in one claim statement, whose takeover of the dead key fails: `late`, its
 * answer arrives after the whole store.timeout and the takeover is refused unsent; `sql`, PostgreSQL refuses the
 * takeover (the test's trigger). Both requests get `status`; the new key must be given back.
 */
async function failedBatch(deadTenant: string, how: 'late' | 'sql', status: number, dead = `dead-${Date.now()}`): Promise<void> {
  const stamp = Date.now();
  const fresh = `fresh-${stamp}`;

  // The dead holder's key: recorded once, then put back in flight under another token with its lease over, as a
  // proxy that died mid-request leaves it (the fingerprint is the request's own).
  assert.equal((await post(deadTenant, dead)).status, 201);
  await sql(db.url, `UPDATE idempotency_keys SET state = 'in_flight', owner_token = gen_random_uuid(), locked_until = now() - interval '1 second',
    completed_at = NULL, status_code = NULL, response_headers = NULL, response_body = NULL, body_retained = NULL, body_size = NULL,
    trace_context = NULL WHERE idem_key = $1`, [dead]);

  // Both statement slots taken (maxInFlight 2): two requests of their own tenants, each its own batch, their claim
  // answers held until released. The two requests below wait together and share the next claim statement.
  let release!: () => void;
  const released = new Promise<void>((r) => { release = r; });
  const blockers: Hold[] = [];
  const blocked: Array<Promise<Reply>> = [];
  for (const tenant of [`blk1-${stamp}`, `blk2-${stamp}`]) {
    const h: Hold = { match: tenant, until: released, seen: [] };
    holds.add(h);
    blockers.push(h);
    blocked.push(post(tenant, `k-${tenant}`));
    await waitFor(`the claim of ${tenant} to be sent`, () => h.seen.length > 0);
  }
  // `late`: the dead key's statements answered after the bound; `sql`: only watched.
  const watch: Hold = how === 'late' ? { match: dead, ms: TIMEOUT_MS + 300, seen: [] } : { match: dead, seen: [] };
  holds.add(watch);
  const both = Promise.all([post('t', fresh), post(deadTenant, dead)]);
  await sleep(500); // both requests in the proxy, waiting for a statement slot
  release();
  const [first, other] = await both;
  holds.delete(watch);
  for (const h of blockers) holds.delete(h);
  for (const r of await Promise.all(blocked)) assert.equal(r.status, 201, 'the blockers ran as usual');

  assert.ok(watch.seen.length > 0 && names(watch.seen[0]!, fresh), 'the two requests did not share one claim statement: the test proved nothing');
  assert.equal(other.status, status, `the dead holder's key: ${other.status} ${other.text()}`);
  assert.equal(first.status, status, `the new key, in the failed batch: ${first.status} ${first.text()}`);
  assert.equal(executionsOf(fresh), 0, 'nothing ran');

  // Given back: the key is free again, and its retry runs once.
  await waitFor('the new key to be given back', async () => (await row(db.url, fresh)) === undefined, 5000);
  const retry = await post('t', fresh);
  assert.equal(retry.status, 201, `the retry: ${retry.status} ${retry.text()}`);
  assert.equal(executionsOf(fresh), 1);
  assert.equal((await post('t', fresh)).headers['idempotent-replayed'], 'true');
}
