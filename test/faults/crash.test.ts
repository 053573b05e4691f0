import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RunningProxy } from '../../src/app.js';
import { send } from '../helpers/http.js';
import type { SpawnedProxy } from '../helpers/proxy.js';
import { createTestDatabase, row, rowCount, sql, type TestDatabase } from '../helpers/db.js';
import { retryWhileInFlight, streamed, trySend } from './helpers/client.js';
import { answer, hold, startControlledUpstream, type ControlledUpstream } from './helpers/controlled-upstream.js';
import { PROBLEM_BASE } from '../../src/http/problems.js';
import { spawnFromYaml, startTestProxy } from '../helpers/proxy.js';
import { openSocket } from '../helpers/raw-http.js';
import { sleep, waitFor } from '../helpers/wait.js';

// SIGKILL of a proxy (a real child process) at each point of the lifecycle.
// A second proxy on the same database serves the retries. docs/contract.md, step 7: a retry
// gets 409 while the dead proxy's lease lasts, then runs again (reexecute,
// the default) or 409 outcome-unknown (fail); a committed record replays.
// No key stays stuck past its lease.

const LEASE_MS = 1000;
// After the kill, the lease runs at most LEASE_MS more (it may have just been
// extended); retries every 100 ms; scheduling slack on a loaded 2-core box.
// A stuck key would stay stuck far longer (forever, or the 90 s default lease).
const STUCK_BOUND_MS = LEASE_MS + 2000;

const YAML = `
upstream: { timeout: 20s }
defaults:
  lease: 1s
  tenant: { constant: t }
routes:
  - name: pay
    match: { path: "/pay/**" }
  - name: strict
    match: { path: "/strict/**" }
    onExpiredLease: fail
`;

describe('SIGKILL of the proxy at each point of the lifecycle', () => {
  let db: TestDatabase;
  let up: ControlledUpstream;
  let survivor: RunningProxy;
  let n = 0;
  const key = (what: string): string => `crash-${what}-${++n}-${Date.now()}`;
  // Spawning a proxy costs a second or two: the next victim starts while the
  // current test waits out its lease.
  let victimsLeft = 6;
  let spare: Promise<SpawnedProxy> | null = null;
  const spawnVictim = () => spawnFromYaml({ upstream: up.url, databaseUrl: db.url, yaml: YAML });
  const victim = (): Promise<SpawnedProxy> => {
    const v = spare ?? spawnVictim();
    spare = --victimsLeft > 0 ? spawnVictim() : null;
    return v;
  };
  const req = (k: string, body = '{"amount":100}') => ({ headers: { 'idempotency-key': k, 'content-type': 'application/json' }, body });

  before(async () => {
    db = await createTestDatabase();
    up = await startControlledUpstream();
    survivor = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: YAML });
  });

  after(async () => {
    if (spare !== null) await (await spare.catch(() => null))?.kill();
    await survivor?.close();
    await up?.close();
    await db?.drop();
  });

  test('before the claim (request body still arriving): nothing claimed, the retry runs at once', async () => {
    const k = key('body');
    up.behave(answer());
    const a = await victim();
    const s = await openSocket(a.url);
    await s.write(`POST /pay/1 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ${k}\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{"amount":`);
    await sleep(300);
    assert.equal(await rowCount(db.url), 0, 'the key must not be claimed before the body is complete');
    assert.equal(up.exchanges.length, 0);
    await a.kill();
    await s.done;
    const r = await send(`${survivor.url}/pay/1`, req(k));
    assert.equal(r.status, 201, 'no lease to wait for: the retry executes at once');
    assert.equal(up.executions(k), 1);
  });

  test('after the claim (upstream holds its answer): 409 until the lease ends, then the retry re-executes', async () => {
    const k = key('claimed');
    up.behave(hold);
    const a = await victim();
    const first = trySend(`${a.url}/pay/1`, req(k));
    const ex = await up.arrival((e) => e.key === k);
    assert.equal((await row(db.url, k))?.state, 'in_flight');
    up.behave(answer());
    await a.kill();
    const killedAt = Date.now();
    assert.ok((await first) instanceof Error, 'the first client gets a broken connection, never an answer');
    await ex.closed;

    const dup = await send(`${survivor.url}/pay/1`, req(k));
    assert.equal(dup.status, 409);
    assert.equal(dup.json().type, `${PROBLEM_BASE}in-flight`);
    assert.ok(Number(dup.headers['retry-after']) >= 1);
    assert.equal(up.executions(k), 1, 'a duplicate inside the lease never reaches the upstream');

    const settled = await retryWhileInFlight(`${survivor.url}/pay/1`, req(k), STUCK_BOUND_MS);
    assert.equal(settled.reply.status, 201);
    assert.ok(Date.now() - killedAt <= STUCK_BOUND_MS, `key stuck ${Date.now() - killedAt} ms after the kill`);
    assert.equal(up.executions(k), 2, 'reexecute: exactly one more execution after the takeover');
    const r = await row(db.url, k);
    assert.deepEqual([r?.state, r?.attempt], ['complete', 2]);
    const replay = await send(`${survivor.url}/pay/1`, req(k));
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.deepEqual(replay.body, settled.reply.body);
  });

  test('while the upstream runs past the lease (heartbeat): duplicates stay out until the kill, then the key frees within one lease', async () => {
    const k = key('running');
    up.behave(hold);
    const a = await victim();
    const first = trySend(`${a.url}/pay/1`, req(k));
    await up.arrival((e) => e.key === k);
    await sleep(LEASE_MS * 1.8);
    const dup = await send(`${survivor.url}/pay/1`, req(k));
    assert.equal(dup.status, 409, 'the heartbeat must have extended the lease past its first second');
    assert.equal(up.executions(k), 1);
    up.behave(answer());
    await a.kill();
    const killedAt = Date.now();
    await first;
    const settled = await retryWhileInFlight(`${survivor.url}/pay/1`, req(k), STUCK_BOUND_MS);
    assert.equal(settled.reply.status, 201);
    assert.ok(Date.now() - killedAt <= STUCK_BOUND_MS);
    assert.equal(up.executions(k), 2);
  });

  test('after the upstream answered, before the commit (body still streaming): the client never gets a complete response; retry re-executes after the lease', async () => {
    const k = key('answered');
    up.behave((ex) => {
      ex.res.writeHead(200, { 'content-type': 'text/plain' });
      ex.res.write('part-1;');
      setTimeout(() => ex.res.write('part-2;'), 100);
      // The end never comes while this proxy lives: the commit waits for it.
    });
    const a = await victim();
    const s = await streamed(`${a.url}/pay/1`, req(k));
    assert.ok(!(s instanceof Error));
    assert.equal(s.status, 200);
    await waitFor('the first chunk to reach the client', () => s.received().includes('part-1;'), 5000);
    assert.equal((await row(db.url, k))?.state, 'in_flight', 'not committed while the body runs');
    up.behave(answer());
    await a.kill();
    const killedAt = Date.now();
    assert.equal(await s.end, 'broken', 'a response whose record is not committed must never complete');
    assert.equal(s.received(), 'part-1;', 'the last chunk is held back until the commit');

    const settled = await retryWhileInFlight(`${survivor.url}/pay/1`, req(k), STUCK_BOUND_MS);
    assert.equal(settled.reply.status, 201);
    assert.ok(settled.conflicts >= 1, 'inside the lease the retry got 409');
    assert.ok(Date.now() - killedAt <= STUCK_BOUND_MS);
    assert.equal(up.executions(k), 2);
  });

  test('after the commit: the retry gets the replay, the upstream is not called again', async () => {
    const k = key('committed');
    up.behave(answer());
    const a = await victim();
    const first = await send(`${a.url}/pay/1`, req(k));
    assert.equal(first.status, 201);
    await a.kill();
    const r = await send(`${survivor.url}/pay/1`, req(k));
    assert.equal(r.status, 201);
    assert.equal(r.headers['idempotent-replayed'], 'true');
    assert.deepEqual(r.body, first.body);
    assert.equal(up.executions(k), 1);
  });

  test('onExpiredLease: fail — after the lease, 409 outcome-unknown (never a second execution) until an operator purges the key', async () => {
    const k = key('strict');
    up.behave(hold);
    const a = await victim();
    const first = trySend(`${a.url}/strict/1`, req(k));
    await up.arrival((e) => e.key === k);
    up.behave(answer());
    await a.kill();
    await first;
    const settled = await retryWhileInFlight(`${survivor.url}/strict/1`, req(k), STUCK_BOUND_MS);
    assert.equal(settled.reply.status, 409);
    assert.equal(settled.reply.json().type, `${PROBLEM_BASE}outcome-unknown`);
    await sleep(500);
    const again = await send(`${survivor.url}/strict/1`, req(k));
    assert.equal(again.json().type, `${PROBLEM_BASE}outcome-unknown`);
    assert.equal(up.executions(k), 1);
    assert.equal((await row(db.url, k))?.state, 'outcome_unknown');

    assert.equal(await survivor.store.purge('t', k), 'outcome_unknown');
    const r = await send(`${survivor.url}/strict/1`, req(k));
    assert.equal(r.status, 201);
    assert.equal(up.executions(k), 2);
  });

  test('afterwards no key is left in flight', async () => {
    const stuck = await sql(db.url, `SELECT idem_key, locked_until FROM idempotency_keys WHERE state = 'in_flight'`);
    assert.deepEqual(stuck, []);
  });
});
