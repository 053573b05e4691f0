// profile: acp — the Agentic Commerce Protocol's idempotency rules
// (rfcs/rfc.agentic_checkout.md §6.1–6.6, and §3.1's echoed header), one
// test per MUST / SHOULD, against a real upstream that answers like an ACP
// merchant (201 on create, 200 on update) and counts its executions.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { sleep } from '../helpers/wait.js';

const YAML = `
defaults:
  profile: acp
routes:
  - name: checkout
    match: { path: /checkout_sessions/** }
  - name: checkout-root
    match: { path: /checkout_sessions }
`;

const AUTH = 'Bearer agent-1';

describe('profile: acp (rfc.agentic_checkout.md §6)', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  /** Statuses to answer first on a path, then 201/200. */
  const failFirst = new Map<string, number[]>();
  const slow = new Set<string>();

  const post = (path: string, key: string | null, body: string, headers: Record<string, string> = {}): Promise<Reply> =>
    send(`${proxy.url}${path}`, {
      headers: { authorization: AUTH, 'content-type': 'application/json', ...(key === null ? {} : { 'idempotency-key': key }), ...headers },
      body,
    });
  const hits = (path: string): number => upstream.received.filter((r) => r.url!.split('?')[0] === path).length;

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(async (req, n, res) => {
      const path = req.url!.split('?')[0]!;
      if (slow.has(path)) await sleep(500);
      const queued = failFirst.get(path);
      const status = queued !== undefined && queued.length > 0 ? queued.shift()! : path === '/checkout_sessions' ? 201 : 200;
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: `cs_${n}`, execution: n, status: status < 300 ? 'ready_for_payment' : 'error' }));
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML });
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  describe('§6.1 Idempotency-Key requirement', () => {
    test('MUST: a POST without Idempotency-Key is rejected 400 {type: invalid_request, code: idempotency_key_required}, nothing forwarded', async () => {
      const r = await post('/checkout_sessions', null, '{"items":[]}');
      assert.equal(r.status, 400);
      assert.match(String(r.headers['content-type']), /^application\/json/);
      const b = r.json();
      assert.equal(b.type, 'invalid_request');
      assert.equal(b.code, 'idempotency_key_required');
      assert.equal(typeof b.message, 'string');
      assert.equal(hits('/checkout_sessions'), 0);
    });

    test('every POST needs it: update, complete and cancel too', async () => {
      for (const p of ['/checkout_sessions/cs_1', '/checkout_sessions/cs_1/complete', '/checkout_sessions/cs_1/cancel']) {
        const r = await post(p, null, '{}');
        assert.equal(r.status, 400, p);
        assert.equal(r.json().code, 'idempotency_key_required', p);
      }
    });

    test('the key is an opaque string of at most 255 characters', async () => {
      const long = 'k'.repeat(255);
      assert.equal((await post('/checkout_sessions/cs_len', long, '{}')).status, 200);
      const tooLong = await post('/checkout_sessions/cs_len', `${long}k`, '{}');
      assert.equal(tooLong.status, 400);
      assert.equal(tooLong.json().type, 'invalid_request');
    });

    test('MUST: keys are scoped to the authenticated identity + endpoint path — the same key elsewhere is independent', async () => {
      const body = '{"fulfillment_option_id":"ship"}';
      const a = await post('/checkout_sessions/cs_a', 'scope-1', body);
      const b = await post('/checkout_sessions/cs_b', 'scope-1', body);
      const other = await post('/checkout_sessions/cs_a', 'scope-1', body, { authorization: 'Bearer agent-2' });
      for (const r of [a, b, other]) {
        assert.equal(r.status, 200);
        assert.equal(r.headers['idempotent-replayed'], undefined);
      }
      assert.equal(hits('/checkout_sessions/cs_a'), 2);
      assert.equal(hits('/checkout_sessions/cs_b'), 1);
      // Each stays bound on its own path and identity.
      assert.equal((await post('/checkout_sessions/cs_b', 'scope-1', body)).json().execution, b.json().execution);
    });
  });

  describe('§6.2 Request equivalence (semantic JSON of the body only)', () => {
    const pair = async (key: string, first: string, second: string, headers: Record<string, string> = {}, path = '/checkout_sessions') => {
      const a = await post(path, key, first);
      const b = await post(path, key, second, headers);
      return { a, b };
    };

    test('MUST: different key ordering is equivalent (replay)', async () => {
      const { a, b } = await pair('eq-order', '{"a":1,"b":{"x":1,"y":2}}', '{"b":{"y":2,"x":1},"a":1}');
      assert.equal(a.status, 201);
      assert.equal(b.headers['idempotent-replayed'], 'true');
      assert.deepEqual(b.json(), a.json());
    });

    test('MUST: null differs from an absent key (422 idempotency_conflict)', async () => {
      const { a, b } = await pair('eq-null', '{"a":null}', '{}');
      assert.equal(a.status, 201);
      assert.equal(b.status, 422);
      assert.equal(b.json().code, 'idempotency_conflict');
    });

    test('MUST: trailing zeros in numbers are equivalent (1.0 == 1: replay)', async () => {
      const { a, b } = await pair('eq-num', '{"a":1.0,"q":[2.50]}', '{"a":1,"q":[2.5]}');
      assert.equal(a.status, 201);
      assert.equal(b.status, 201);
      assert.equal(b.headers['idempotent-replayed'], 'true');
    });

    test('MUST: array order matters (422)', async () => {
      const { b } = await pair('eq-array', '{"items":[1,2]}', '{"items":[2,1]}');
      assert.equal(b.status, 422);
      assert.equal(b.json().code, 'idempotency_conflict');
    });

    test('headers are excluded (and so is the query): other headers, same body → replay', async () => {
      const a = await post('/checkout_sessions', 'eq-headers', '{"a":1}', { 'accept-language': 'en-US', 'content-type': 'application/json' });
      const b = await send(`${proxy.url}/checkout_sessions?x=1`, {
        headers: { authorization: AUTH, 'idempotency-key': 'eq-headers', 'content-type': 'application/json; charset=utf-8', 'accept-language': 'fr-FR', 'user-agent': 'other' },
        body: '{ "a" : 1 }',
      });
      assert.equal(a.status, 201);
      assert.equal(b.headers['idempotent-replayed'], 'true');
    });
  });

  describe('§6.3 Replay behavior', () => {
    test('MUST: same key + identical body returns the original response with the same status; side effects not re-executed', async () => {
      const a = await post('/checkout_sessions', 'replay-1', '{"items":[{"id":"sku","quantity":1}]}');
      const n = hits('/checkout_sessions');
      const b = await post('/checkout_sessions', 'replay-1', '{"items":[{"id":"sku","quantity":1}]}');
      assert.equal(a.status, 201);
      assert.equal(b.status, 201);
      assert.deepEqual(b.body, a.body);
      assert.equal(hits('/checkout_sessions'), n, 'not executed again');
    });

    test('SHOULD: the replay carries Idempotent-Replayed: true', async () => {
      await post('/checkout_sessions', 'replay-2', '{}');
      const b = await post('/checkout_sessions', 'replay-2', '{}');
      assert.equal(b.headers['idempotent-replayed'], 'true');
    });

    test('update endpoints (POST /checkout_sessions/{id}) replay the same way', async () => {
      const a = await post('/checkout_sessions/cs_up', 'update-1', '{"buyer":{"email":"a@b.c"}}');
      const b = await post('/checkout_sessions/cs_up', 'update-1', '{"buyer":{"email":"a@b.c"}}');
      assert.equal(a.status, 200);
      assert.equal(b.status, 200);
      assert.equal(b.headers['idempotent-replayed'], 'true');
      assert.equal(hits('/checkout_sessions/cs_up'), 1);
    });
  });

  describe('§6.4 Error responses', () => {
    test('422 payload mismatch: {type: invalid_request, code: idempotency_conflict, message}, not retryable', async () => {
      await post('/checkout_sessions', 'err-422', '{"a":1}');
      const r = await post('/checkout_sessions', 'err-422', '{"a":2}');
      assert.equal(r.status, 422);
      const b = r.json();
      assert.deepEqual(Object.keys(b).sort(), ['code', 'message', 'type']);
      assert.equal(b.type, 'invalid_request');
      assert.equal(b.code, 'idempotency_conflict');
    });

    test('409 in flight: {type: invalid_request, code: idempotency_in_flight}; SHOULD carry Retry-After (seconds)', async () => {
      slow.add('/checkout_sessions/cs_slow');
      const first = post('/checkout_sessions/cs_slow', 'err-409', '{}');
      await sleep(150);
      const r = await post('/checkout_sessions/cs_slow', 'err-409', '{}');
      assert.equal((await first).status, 200);
      assert.equal(r.status, 409);
      assert.equal(r.json().type, 'invalid_request');
      assert.equal(r.json().code, 'idempotency_in_flight');
      assert.match(String(r.headers['retry-after']), /^[1-9][0-9]*$/);
    });
  });

  describe('§6.5 Server error caching', () => {
    for (const status of [500, 503]) {
      test(`MUST NOT cache a ${status}: the retry is processed as a fresh request, and its 201 is what is replayed`, async () => {
        const path = '/checkout_sessions';
        failFirst.set(path, [status]);
        const a = await post(path, `err-${status}`, '{"a":1}');
        assert.equal(a.status, status);
        const b = await post(path, `err-${status}`, '{"a":1}');
        assert.equal(b.status, 201);
        assert.equal(b.headers['idempotent-replayed'], undefined);
        const c = await post(path, `err-${status}`, '{"a":1}');
        assert.equal(c.headers['idempotent-replayed'], 'true');
        assert.equal(c.json().execution, b.json().execution);
      });
    }
  });

  describe('§6.6 Key retention', () => {
    test('MUST retain at least 24 hours: a shorter ttl under profile: acp is a configuration error naming the field', () => {
      const load = (extra: string) => loadConfig({ text: `defaults:\n  profile: acp\n${extra}`, flags: { upstream: 'http://127.0.0.1:9', databaseUrl: null }, env: {} });
      assert.throws(() => load('  ttl: 1h\n'), /defaults\.ttl: ttl \(1h\) must be at least 24h under profile: acp/);
      assert.equal(load('').routes[0]!.ttlMs, 86_400_000);
      assert.equal(load('  ttl: 48h\n').routes[0]!.ttlMs, 172_800_000);
    });

    test('after expiry a reused key is a new request (no error)', async () => {
      const a = await post('/checkout_sessions', 'expire-1', '{"a":1}');
      await sql(db.url, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE idem_key = 'expire-1'`);
      const b = await post('/checkout_sessions', 'expire-1', '{"a":2}');
      assert.equal(b.status, 201);
      assert.equal(b.headers['idempotent-replayed'], undefined);
      assert.notEqual(b.json().execution, a.json().execution);
    });
  });

  describe('§3.1 response headers', () => {
    test('Idempotency-Key is echoed on every POST response: executed, replayed, 409, 422, and the upstream’s 5xx', async () => {
      slow.add('/checkout_sessions/cs_echo');
      const first = post('/checkout_sessions/cs_echo', 'echo-1', '{}');
      await sleep(150);
      const inFlight = await post('/checkout_sessions/cs_echo', 'echo-1', '{}');
      const executed = await first;
      const replay = await post('/checkout_sessions/cs_echo', 'echo-1', '{}');
      const mismatch = await post('/checkout_sessions/cs_echo', 'echo-1', '{"x":1}');
      failFirst.set('/checkout_sessions/cs_echo5', [502]);
      const upstream5xx = await post('/checkout_sessions/cs_echo5', 'echo-2', '{}');
      assert.deepEqual([executed, inFlight, replay, mismatch, upstream5xx].map((r) => r.status), [200, 409, 200, 422, 502]);
      for (const r of [executed, inFlight, replay, mismatch]) assert.equal(r.headers['idempotency-key'], 'echo-1');
      assert.equal(upstream5xx.headers['idempotency-key'], 'echo-2');
    });
  });
  describe('keyScope: tenantAndPath under load', () => {
    /** Claim statements sent and the key rows they carried, from the proxy's own histogram. */
    const claimBatches = async (): Promise<{ statements: number; rows: number }> => {
      const text = await proxy.metrics.registry.metrics();
      const read = (name: string): number => Number(new RegExp(`^${name}\\{statement="claim"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 'NaN');
      return { statements: read('idempotency_proxy_store_batch_size_count'), rows: read('idempotency_proxy_store_batch_size_sum') };
    };

    test('completes of 24 sessions at the same moment, each sent three times: each runs once, and claims of different paths share statements', async () => {
      const paths = Array.from({ length: 24 }, (_, i) => `/checkout_sessions/cs_load_${i}/complete`);
      const before = await claimBatches();
      // Every path is a key scope of its own (the stored tenant is "<tenant> <path>"): the same key on each.
      const replies = await Promise.all(paths.flatMap((p) => [0, 1, 2].map(() => post(p, 'complete-once', '{"payment":"tok"}'))));
      for (const p of paths) assert.equal(hits(p), 1, p);
      for (const r of replies) assert.ok([200, 409].includes(r.status), String(r.status));
      const after = await claimBatches();
      const statements = after.statements - before.statements;
      const rows = after.rows - before.rows;
      // One statement per path would carry one key each (duplicates in a batch fold into one row).
      assert.ok(rows > statements, `${statements} claim statements carried ${rows} keys: none shared across paths`);
    });
  });
});
