import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RunningProxy } from '../../src/app.js';
import { send, together } from '../helpers/http.js';
import type { SpawnedProxy } from '../helpers/proxy.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { PROBLEM_BASE as PROBLEM } from '../../src/http/problems.js';
import { retryWhileInFlight, trySend } from './helpers/client.js';
import { startOrderService, type OrderEvent, type OrderService } from './helpers/order-service-process.js';
import { row, sql as query } from '../helpers/db.js';
import { spawnFromYaml, startTestProxy as startInProcess } from '../helpers/proxy.js';
import { sleep, waitFor } from '../helpers/wait.js';

// Co-commit (docs/co-commit.md): an order service on the proxy's database
// inserts the order and settles the proxy's record in one transaction. A
// proxy SIGKILLed between the upstream's commit and the answer reaching it
// loses nothing: a retry through another instance gets the settled response
// replayed, on a reexecute route. Without settling (the control) the same
// crash runs the order twice.

const LEASE_MS = 1000;
const STUCK_BOUND_MS = LEASE_MS + 3000;

const YAML = `
upstream: { timeout: 20s }
defaults:
  lease: 1s
  tenant: { constant: t }
routes:
  - name: orders
    match: { path: "/orders" }
  - name: open
    match: { path: "/open/**" }
    mode: passthrough
`;

describe('co-commit: the upstream settles the key in its own transaction', () => {
  let db: TestDatabase;
  let svc: OrderService;
  let survivor: RunningProxy;
  let n = 0;
  const key = (what: string): string => `cc-${what}-${++n}-${Date.now()}`;
  const req = (k: string, extra: Record<string, string> = {}) => ({
    headers: { 'idempotency-key': k, 'content-type': 'application/json', ...extra },
    body: '{"amount":100}',
  });
  const victim = (): Promise<SpawnedProxy> => spawnFromYaml({ upstream: svc.url, databaseUrl: db.url, yaml: YAML });
  const orders = async (k: string): Promise<number> =>
    (await query<{ n: number }>(db.url, 'SELECT count(*)::int AS n FROM orders WHERE idem_key = $1', [k]))[0]!.n;
  const executions = (k: string): number => svc.events.filter((e) => e.event === 'received' && e.key === k).length;
  const on = (event: OrderEvent['event'], k: string) => (e: OrderEvent) => e.event === event && e.key === k;
  const ownerOf = (claim: string | null | undefined): string => claim!.split('.')[3]!;

  before(async () => {
    db = await createTestDatabase();
    svc = await startOrderService(db.url);
    survivor = await startInProcess({ upstream: svc.url, databaseUrl: db.url, yaml: YAML });
  });

  after(async () => {
    await survivor?.close();
    await svc?.close();
    await db?.drop();
  });

  test('SIGKILL after the upstream committed, before its answer reached the proxy: the retry through another instance replays the settled response, one order', async () => {
    const k = key('settled');
    await svc.mode({ settle: true, after: 'hold', pauseBeforeSettle: false, delayMs: 0 });
    const a = await victim();
    const first = trySend(`${a.url}/orders`, req(k));
    const committed = await svc.waitFor(on('committed', k), 'the order to commit');
    assert.equal((await svc.waitFor(on('settle', k), 'the settle')).result, true);
    await a.kill();
    assert.ok((await first) instanceof Error, 'the first client never got an answer');
    await svc.mode({ after: 'answer' });
    assert.equal((await row(db.url, k))?.state, 'complete', 'settled with the business transaction');

    const now = await send(`${survivor.url}/orders`, req(k));
    assert.equal(now.status, 201, 'complete at once: no lease to wait for');
    assert.equal(now.headers['idempotent-replayed'], 'true');
    assert.equal(now.text(), committed.body);
    assert.equal(now.headers['content-type'], 'application/json');
    assert.equal(now.headers['x-order-id'], JSON.parse(committed.body!).id);
    await sleep(LEASE_MS + 200);
    const later = await send(`${survivor.url}/orders`, req(k));
    assert.equal(later.headers['idempotent-replayed'], 'true', 'after the lease, still the replay: never a second execution');
    assert.equal(later.text(), committed.body);
    assert.equal(executions(k), 1);
    assert.equal(await orders(k), 1, 'exactly one order');
  });

  test('control: the same crash without settling runs the order twice (reexecute)', async () => {
    const k = key('control');
    await svc.mode({ settle: false, after: 'hold' });
    const a = await victim();
    const first = trySend(`${a.url}/orders`, req(k));
    await svc.waitFor(on('committed', k), 'the order to commit');
    await a.kill();
    await first;
    await svc.mode({ after: 'answer' });
    assert.equal((await row(db.url, k))?.state, 'in_flight');
    const retried = await retryWhileInFlight(`${survivor.url}/orders`, req(k), STUCK_BOUND_MS);
    assert.equal(retried.reply.status, 201);
    assert.equal(retried.reply.headers['idempotent-replayed'], undefined, 'executed again, not replayed');
    assert.equal(executions(k), 2);
    assert.equal(await orders(k), 2, 'the crash between commit and record made a second order');
    await svc.mode({ settle: true });
  });

  test('the business transaction rolls back after settling: no order, no complete record; the retry after the lease executes once', async () => {
    const k = key('rollback');
    await svc.mode({ settle: true, after: 'raise-hold' });
    const a = await victim();
    const first = trySend(`${a.url}/orders`, req(k));
    assert.equal((await svc.waitFor(on('settle', k), 'the settle')).result, true, 'settled inside the transaction');
    await svc.waitFor(on('rolled-back', k), 'the rollback');
    assert.equal(await orders(k), 0);
    assert.equal((await row(db.url, k))?.state, 'in_flight', 'the rollback undid the settle');
    await a.kill();
    await first;
    await svc.mode({ after: 'answer' });

    const retried = await retryWhileInFlight(`${survivor.url}/orders`, req(k), STUCK_BOUND_MS);
    assert.equal(retried.reply.status, 201);
    assert.ok(retried.conflicts >= 1, 'inside the lease the retry got 409');
    assert.equal(executions(k), 2, 'one execution after the lease');
    assert.equal(await orders(k), 1, 'exactly one order at the end');
    const r = await query<{ state: string; attempt: number }>(db.url, 'SELECT state, attempt FROM idempotency_keys WHERE idem_key = $1', [k]);
    assert.deepEqual(r[0], { state: 'complete', attempt: 2 });
    const replay = await send(`${survivor.url}/orders`, req(k));
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.deepEqual(replay.body, retried.reply.body);
  });

  test('a fenced attempt (its proxy paused past the lease, the key taken over) cannot settle: false, and the record is the new owner\'s', async () => {
    const k = key('fenced');
    await svc.mode({ settle: true, after: 'answer', pauseBeforeSettle: true });
    const a = await victim();
    try {
      const first = trySend(`${a.url}/orders`, req(k));
      const pausedA = await svc.waitFor(on('paused', k), 'the first attempt to reach its settle');
      a.proc.kill('SIGSTOP');
      // The new owner takes the key over once A's lease has run out, and
      // pauses before its own settle: the row is in flight under its token.
      const b = retryWhileInFlight(`${survivor.url}/orders`, req(k), STUCK_BOUND_MS);
      const pausedB = await svc.waitFor((e) => on('paused', k)(e) && e.claim !== pausedA.claim, 'the takeover', STUCK_BOUND_MS);
      assert.notEqual(ownerOf(pausedB.claim), ownerOf(pausedA.claim));

      await svc.release(pausedA.claim!);
      const settleA = await svc.waitFor((e) => on('settle', k)(e) && e.claim === pausedA.claim, 'the fenced attempt\'s settle');
      assert.equal(settleA.result, false, 'a fenced claim settles nothing');
      const rowNow = await query<{ state: string; owner: string }>(db.url, 'SELECT state, owner_token::text AS owner FROM idempotency_keys WHERE idem_key = $1', [k]);
      assert.deepEqual(rowNow[0], { state: 'in_flight', owner: ownerOf(pausedB.claim) }, 'unchanged: still the new owner\'s, in flight');

      await svc.mode({ pauseBeforeSettle: false });
      await svc.release(pausedB.claim!);
      const done = await b;
      assert.equal(done.reply.status, 201, 'the new owner executed');
      assert.equal((await svc.waitFor((e) => on('settle', k)(e) && e.claim === pausedB.claim, 'the new owner\'s settle')).result, true);
      assert.equal(await orders(k), 1, 'the fenced attempt rolled back its order');
      const [r] = await query<{ state: string; attempt: number; owner: string; body: string }>(db.url,
        "SELECT state, attempt, owner_token::text AS owner, convert_from(response_body, 'UTF8') AS body FROM idempotency_keys WHERE idem_key = $1", [k]);
      assert.deepEqual(r, { state: 'complete', attempt: 2, owner: ownerOf(pausedB.claim), body: done.reply.text() });

      a.proc.kill('SIGCONT');
      assert.ok((await first) instanceof Error, 'the paused proxy\'s commit is fenced: its client never gets a complete response');
      const replay = await send(`${survivor.url}/orders`, req(k));
      assert.equal(replay.text(), done.reply.text());
    } finally {
      if (a.proc.exitCode === null && a.proc.signalCode === null) a.proc.kill('SIGCONT');
      await a.kill();
      await svc.mode({ pauseBeforeSettle: false });
      await svc.release();
    }
  });

  test('50 duplicates at the same moment against a settling upstream: one order; every answer the settled response or 409', async () => {
    const k = key('storm');
    await svc.mode({ settle: true, after: 'answer', pauseBeforeSettle: false, delayMs: 300 });
    const replies = await together(50, () => send(`${survivor.url}/orders`, req(k)));
    await svc.mode({ delayMs: 0 });
    const committed = await svc.waitFor(on('committed', k), 'the order');
    assert.equal(executions(k), 1);
    assert.equal(await orders(k), 1);
    let ok = 0;
    for (const r of replies) {
      if (r.status === 409) {
        assert.equal(r.json().type, `${PROBLEM}in-flight`);
        continue;
      }
      assert.equal(r.status, 201);
      assert.equal(r.text(), committed.body, 'the settled response, byte for byte');
      ok++;
    }
    assert.ok(ok >= 1);
    const replay = await send(`${survivor.url}/orders`, req(k));
    assert.equal(replay.text(), committed.body);
  });

  test('a client-sent Idempotency-Claim never reaches the upstream: replaced on an owned key, removed on pass-through', async () => {
    const forged = `v1.dA.${Buffer.from('someone-else').toString('base64url')}.00000000-0000-4000-8000-000000000000`;
    const k = key('forged');
    const r = await send(`${survivor.url}/orders`, req(k, { 'idempotency-claim': forged }));
    assert.equal(r.status, 201);
    const got = (await svc.waitFor(on('received', k), 'the request')).claim!;
    assert.notEqual(got, forged);
    assert.equal(got.split('.').slice(0, 3).join('.'), `v1.${Buffer.from('t').toString('base64url')}.${Buffer.from(k).toString('base64url')}`);
    assert.match(ownerOf(got), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);

    const k2 = key('forged-open');
    const open = await send(`${survivor.url}/open/x`, req(k2, { 'idempotency-claim': forged }));
    assert.equal(open.status, 201);
    assert.equal((await svc.waitFor(on('received', k2), 'the pass-through request')).claim, null);
    await waitFor('the pass-through order', async () => (await orders(k2)) === 1, 5000);
  });
});
