import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RunningProxy } from '../../src/app.js';
import { PROBLEM_BASE as PROBLEM } from '../../src/http/problems.js';
import { row, sql, createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send, together, type Reply } from '../helpers/http.js';
import { metric, metricsText } from '../helpers/metrics.js';
import { spawnFromYaml, startLoggedProxy, startTestProxy, type LogLine, type SpawnedProxy } from '../helpers/proxy.js';
import { closedPort } from '../helpers/upstream.js';
import { waitFor } from '../helpers/wait.js';
import { retryWhileInFlight, trySend } from './helpers/client.js';
import { startControlledUpstream, type ControlledUpstream, type Exchange } from './helpers/controlled-upstream.js';

// onExpiredLease: probe (docs/guarantees.md, Asking the upstream). A proxy
// (a real child process) is SIGKILLed while the upstream holds the POST; once
// its lease has run out, the retry through another instance asks the
// upstream's lookup endpoint first: found → the lookup's answer is recorded
// and replayed, no second execution; 404 → one execution; anything else →
// 409 outcome-unknown, stored, so the next retry is 409 too. While the lease
// is live nothing is probed.

const LEASE_MS = 1000;
const STUCK_BOUND_MS = LEASE_MS + 3000;
const AUTH = 'Bearer sk_test_probe';
const PROBE_PREFIX = '/v1/orders/by-idempotency-key/';

const yaml = (timeout = '20s'): string => `
upstream: { timeout: ${timeout} }
defaults:
  lease: 1s
routes:
  - name: orders
    match: { path: "/v1/orders" }
    onExpiredLease: probe
    outcomeProbe: { method: GET, path: "${PROBE_PREFIX}{key}" }
`;

type ProbeMode = { kind: 'found' } | { kind: 'status'; status: number } | { kind: 'hang' };

describe('onExpiredLease: probe — a crashed holder, then the upstream is asked', () => {
  let db: TestDatabase;
  let up: ControlledUpstream;
  let survivor: RunningProxy;
  let other: RunningProxy;
  let lines: LogLine[];
  let holdPosts = true;
  let probeMode: ProbeMode = { kind: 'status', status: 404 };
  let probeDelayMs = 0;
  let n = 0;
  // Characters the probe path must encode.
  const key = (what: string): string => `pr/${what}?${++n}%${Date.now()}`;
  const req = (k: string) => ({ headers: { 'idempotency-key': k, authorization: AUTH, 'content-type': 'application/json' }, body: '{"amount":100}' });
  const posts = (k: string): Exchange[] => up.exchanges.filter((e) => e.method === 'POST' && e.key === k);
  const probes = (k: string): Exchange[] => up.exchanges.filter((e) => e.method === 'GET' && e.url === PROBE_PREFIX + encodeURIComponent(k));
  const found = (k: string): string => JSON.stringify({ id: 'ord_found', idempotencyKey: k });

  let victimsLeft = 7;
  let spare: Promise<SpawnedProxy> | null = null;
  const spawnVictim = () => spawnFromYaml({ upstream: up.url, databaseUrl: db.url, yaml: yaml() });
  const victim = (): Promise<SpawnedProxy> => {
    const v = spare ?? spawnVictim();
    spare = --victimsLeft > 0 ? spawnVictim() : null;
    return v;
  };

  /** A victim proxy takes the POST, the upstream holds it, the victim is SIGKILLed: the row stays in flight. */
  async function crashedHolder(k: string): Promise<void> {
    const a = await victim();
    const first = trySend(`${a.url}/v1/orders`, req(k));
    await up.arrival((e) => e.method === 'POST' && e.key === k);
    await a.kill();
    assert.ok((await first) instanceof Error, 'the first client never got an answer');
    assert.equal((await row(db.url, k))?.state, 'in_flight');
  }

  const leaseOver = (k: string) => waitFor('the dead holder\'s lease to run out', async () =>
    (await sql<{ over: boolean }>(db.url, 'SELECT locked_until <= now() AS over FROM idempotency_keys WHERE idem_key = $1', [k]))[0]?.over === true,
  STUCK_BOUND_MS);

  const isProblem = (r: Reply, slug: string): boolean => r.status === 409 && r.json().type === `${PROBLEM}${slug}`;

  before(async () => {
    db = await createTestDatabase();
    up = await startControlledUpstream((ex) => {
      if (ex.method === 'POST') {
        if (!holdPosts) ex.respond(201, JSON.stringify({ id: `ord_${ex.n}` }), { 'x-order-id': `ord_${ex.n}` });
        return;
      }
      if (!ex.url.startsWith(PROBE_PREFIX)) return ex.respond(400, '{"error":"unexpected"}');
      const mode = probeMode;
      const go = (): void => {
        if (mode.kind === 'hang') return;
        if (mode.kind === 'found') ex.respond(200, found(decodeURIComponent(ex.url.slice(PROBE_PREFIX.length))), { 'x-order-id': 'ord_found' });
        else ex.respond(mode.status, JSON.stringify({ status: mode.status }));
      };
      if (probeDelayMs > 0) setTimeout(go, probeDelayMs);
      else go();
    });
    const logged = await startLoggedProxy({ upstream: up.url, databaseUrl: db.url, yaml: yaml() });
    survivor = logged.proxy;
    lines = logged.lines;
    other = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: yaml() });
  });

  after(async () => {
    await (await spare)?.kill();
    await survivor?.close();
    await other?.close();
    await up?.close();
    await db?.drop();
  });

  test('the probe finds the order: its answer is recorded and replayed, the POST ran once; a further retry replays the same', async () => {
    const k = key('found');
    holdPosts = true;
    await crashedHolder(k);
    probeMode = { kind: 'found' };
    holdPosts = false;
    const retried = await retryWhileInFlight(`${survivor.url}/v1/orders`, req(k), STUCK_BOUND_MS);
    assert.equal(posts(k).length, 1, 'the operation did not run again');
    assert.equal(retried.reply.status, 200, 'the probe\'s status');
    assert.equal(retried.reply.headers['idempotent-replayed'], 'true');
    assert.equal(retried.reply.text(), found(k));
    assert.equal(retried.reply.headers['x-order-id'], 'ord_found');
    const [p] = probes(k);
    assert.equal(probes(k).length, 1);
    assert.equal(p!.headers.authorization, AUTH, 'the probe carries the tenant\'s credential');
    assert.equal(p!.headers['idempotency-key'], k, 'and the key header');
    assert.equal(p!.body.length, 0);
    const [r] = await sql<{ state: string; attempt: number; status_code: number; body: string }>(db.url,
      "SELECT state, attempt, status_code, convert_from(response_body, 'UTF8') AS body FROM idempotency_keys WHERE idem_key = $1", [k]);
    assert.deepEqual(r, { state: 'complete', attempt: 2, status_code: 200, body: found(k) });

    for (const proxy of [survivor, other]) {
      const again = await send(`${proxy.url}/v1/orders`, req(k));
      assert.equal(again.status, 200);
      assert.equal(again.headers['idempotent-replayed'], 'true');
      assert.equal(again.text(), found(k));
    }
    assert.equal(posts(k).length, 1);
    assert.equal(probes(k).length, 1, 'a complete record is replayed without asking again');
    const line = await waitFor('the request line with the probe', () => lines.find((l) => l.msg === 'request' && l.probe === 'found'));
    assert.equal(line.outcome, 'replayed');
    assert.equal(line.phase, 'probe');
    assert.equal(line.attempt, 2);
    assert.ok(metric(await metricsText(survivor.adminUrl), 'idempotency_proxy_outcome_probes_total', { route: 'orders', result: 'found' }) >= 1);
  });

  test('the probe answers 404: the request executes, exactly once', async () => {
    const k = key('absent');
    holdPosts = true;
    await crashedHolder(k);
    probeMode = { kind: 'status', status: 404 };
    holdPosts = false;
    const retried = await retryWhileInFlight(`${survivor.url}/v1/orders`, req(k), STUCK_BOUND_MS);
    assert.equal(retried.reply.status, 201);
    assert.equal(retried.reply.headers['idempotent-replayed'], undefined, 'executed, not replayed');
    assert.equal(posts(k).length, 2, 'the crashed attempt and one new execution');
    assert.equal(probes(k).length, 1);
    const replay = await send(`${other.url}/v1/orders`, req(k));
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.equal(replay.text(), retried.reply.text());
    assert.equal(posts(k).length, 2);
    assert.equal(probes(k).length, 1);
    const line = await waitFor('the request line', () => lines.find((l) => l.msg === 'request' && l.probe === 'absent'));
    assert.equal(line.outcome, 'executed');
  });

  test('the probe answers 500: 409 outcome-unknown, stored; the next retry is 409 too, nothing executes', async () => {
    const k = key('error');
    holdPosts = true;
    await crashedHolder(k);
    probeMode = { kind: 'status', status: 500 };
    holdPosts = false;
    const retried = await retryWhileInFlight(`${survivor.url}/v1/orders`, req(k), STUCK_BOUND_MS);
    assert.ok(isProblem(retried.reply, 'outcome-unknown'), retried.reply.text());
    assert.equal((await row(db.url, k))?.state, 'outcome_unknown');
    probeMode = { kind: 'found' }; // not asked again: the key is settled as unknown
    for (const proxy of [survivor, other]) {
      const again = await send(`${proxy.url}/v1/orders`, req(k));
      assert.ok(isProblem(again, 'outcome-unknown'), again.text());
    }
    assert.equal(posts(k).length, 1, 'never a second execution');
    assert.equal(probes(k).length, 1);
    const line = await waitFor('the request line', () => lines.find((l) => l.msg === 'request' && l.probe === 'failed'));
    assert.equal(line.outcome, 'conflict');
    assert.match(String(line.detail), /the outcome probe answered 500/);
    assert.ok(metric(await metricsText(survivor.adminUrl), 'idempotency_proxy_outcome_probes_total', { route: 'orders', result: 'failed' }) >= 1);
  });

  test('no answer to the probe (connection refused; no answer within upstream.timeout): 409 outcome-unknown, and the next retry is 409 too', async () => {
    const refused = await startTestProxy({ upstream: `http://127.0.0.1:${await closedPort()}`, databaseUrl: db.url, yaml: yaml() });
    const slow = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: yaml('500ms') });
    try {
      const k1 = key('refused');
      holdPosts = true;
      await crashedHolder(k1);
      holdPosts = false;
      const r1 = await retryWhileInFlight(`${refused.url}/v1/orders`, req(k1), STUCK_BOUND_MS);
      assert.ok(isProblem(r1.reply, 'outcome-unknown'), r1.reply.text());

      const k2 = key('timeout');
      holdPosts = true;
      await crashedHolder(k2);
      holdPosts = false;
      probeMode = { kind: 'hang' };
      const r2 = await retryWhileInFlight(`${slow.url}/v1/orders`, req(k2), STUCK_BOUND_MS);
      assert.ok(isProblem(r2.reply, 'outcome-unknown'), r2.reply.text());
      assert.equal(probes(k2).length, 1, 'the probe reached the upstream, which never answered');

      probeMode = { kind: 'status', status: 404 };
      for (const k of [k1, k2]) {
        assert.equal((await row(db.url, k))?.state, 'outcome_unknown');
        const again = await send(`${survivor.url}/v1/orders`, req(k));
        assert.ok(isProblem(again, 'outcome-unknown'), again.text());
        assert.equal(posts(k).length, 1, 'never a second execution');
      }
      assert.equal(probes(k1).length, 0);
      assert.equal(probes(k2).length, 1);
    } finally {
      await refused.close();
      await slow.close();
    }
  });

  test('under a live lease nothing is probed: duplicates get 409 in-flight while the holder lives, and after its crash until the lease ends', async () => {
    const k = key('live');
    holdPosts = true;
    probeMode = { kind: 'found' };
    const a = await victim();
    const first = trySend(`${a.url}/v1/orders`, req(k));
    await up.arrival((e) => e.method === 'POST' && e.key === k);
    // Past one lease length: the holder's heartbeat keeps the lease live.
    const t0 = Date.now();
    while (Date.now() - t0 < LEASE_MS * 1.5) {
      const dups = await together(3, (i) => send(`${(i % 2 === 0 ? survivor : other).url}/v1/orders`, req(k)));
      for (const d of dups) assert.ok(isProblem(d, 'in-flight'), d.text());
      await new Promise((r) => setTimeout(r, 100));
    }
    await a.kill();
    await first;
    const dup = await send(`${survivor.url}/v1/orders`, req(k));
    assert.ok(isProblem(dup, 'in-flight'), `right after the crash the lease still holds: ${dup.text()}`);
    assert.equal(probes(k).length, 0, 'never probed under a live lease');
    assert.equal(posts(k).length, 1);
  });

  test('20 retries at the same moment after the lease ran out, through two instances: one probe, at most one execution', async () => {
    const k = key('storm');
    holdPosts = true;
    await crashedHolder(k);
    await leaseOver(k);
    probeMode = { kind: 'status', status: 404 };
    probeDelayMs = 200; // the probe is slow: the other retries arrive while it runs
    holdPosts = false;
    try {
      const replies = await together(20, (i) => send(`${(i % 2 === 0 ? survivor : other).url}/v1/orders`, req(k)));
      assert.equal(probes(k).length, 1, 'exactly one probe');
      assert.ok(posts(k).length <= 2, `at most one new execution (POSTs: ${posts(k).length})`);
      let executed = 0;
      for (const r of replies) {
        if (r.status === 201) executed++;
        else assert.ok(isProblem(r, 'in-flight'), `${r.status} ${r.text()}`);
      }
      assert.ok(executed <= 1);
      const final = await retryWhileInFlight(`${survivor.url}/v1/orders`, req(k), STUCK_BOUND_MS);
      assert.equal(final.reply.status, 201);
      assert.equal(posts(k).length, 2, 'one execution after the probe');
      assert.equal(probes(k).length, 1);
    } finally {
      probeDelayMs = 0;
    }
  });
});
