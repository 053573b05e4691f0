// The phases one by one (fastify's test/internals habit): each phase runs
// alone on a real HTTP request, inside a real server's handler, against
// routes compiled from a real configuration, and the verdict it returns is
// what the test asserts. No store and no upstream: these phases need neither.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadConfig } from '../../src/config/load.js';
import { MemoryBudget } from '../../src/lifecycle/budget.js';
import { RequestContext } from '../../src/lifecycle/context.js';
import type { LifecycleDeps } from '../../src/lifecycle/deps.js';
import { bodyPhase } from '../../src/lifecycle/phases/body.js';
import { framingPhase } from '../../src/lifecycle/phases/framing.js';
import { identifyPhase } from '../../src/lifecycle/phases/identify.js';
import { routePhase } from '../../src/lifecycle/phases/route.js';
import { Plans } from '../../src/lifecycle/plan.js';
import type { Phase, Verdict } from '../../src/lifecycle/verdict.js';
import { createLogger } from '../../src/log/logger.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { Router } from '../../src/policy/router.js';
import { send } from '../helpers/http.js';
import { rawRequest } from '../helpers/raw-http.js';

const yaml = `
routes:
  - name: pay
    match: { path: "/pay/**" }
    required: true
    maxBodyBytes: 16B
  - name: optional
    match: { path: "/opt/**" }
  - name: hooks
    match: { path: "/hooks/**" }
    key: { fromBody: /event/id }
  - name: watch
    match: { path: "/watch/**" }
    mode: shadow
    required: true
  - name: rest
    match: { path: "/**" }
    mode: passthrough
`;

interface Seen {
  readonly verdicts: Array<Record<string, unknown>>;
  readonly ctx: { key: string | null; tenantId: string; fingerprint: string; plan: string[] | null; shadow: string | null };
}

describe('each phase alone', () => {
  const metrics = createMetrics({ processMetrics: false });
  const config = loadConfig({ text: yaml, flags: { upstream: 'http://127.0.0.1:9', databaseUrl: null }, env: {} });
  const plans = (cache: boolean): Plans => new Plans(new Router(config), { cache });
  let deps = { plans: plans(false), metrics, logger: createLogger('silent'), budget: new MemoryBudget(1 << 20) } as unknown as LifecycleDeps;
  let phases: Phase[] = [];
  let server: http.Server;
  let url: string;
  before(async () => {
    server = http.createServer({ requireHostHeader: false }, async (req, res) => {
      const ctx = new RequestContext(req, res);
      const verdicts: Array<Record<string, unknown>> = [];
      for (const p of phases) {
        const v: Verdict = await p.run(deps, ctx);
        verdicts.push(v.kind === 'problem' ? { kind: v.kind, slug: v.problem.slug, status: v.status ?? v.problem.status, close: v.close ?? false } : { ...v });
        if (v.kind !== 'next') break;
      }
      const seen: Seen = {
        verdicts,
        ctx: { key: ctx.key, tenantId: ctx.tenantId, fingerprint: ctx.fingerprint.toString('hex'), plan: ctx.plan?.phases.map((p) => p.name) ?? null, shadow: ctx.shadow },
      };
      res.writeHead(200, { 'content-type': 'application/json', connection: 'close' }).end(JSON.stringify(seen));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((r) => server.close(() => r())));

  const run = async (list: Phase[], path: string, opts: Parameters<typeof send>[1] = {}): Promise<Seen> => {
    phases = list;
    return (await send(`${url}${path}`, opts)).json() as Seen;
  };

  test('framing: a second Host line is refused and closes the connection; a clean request goes on', async () => {
    phases = [framingPhase];
    const r = await rawRequest(url, 'POST /pay/1 HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
    assert.deepEqual(r.json().verdicts, [{ kind: 'problem', slug: 'bad-request', status: 400, close: true }]);
    assert.deepEqual((await run([framingPhase], '/pay/1')).verdicts, [{ kind: 'next' }]);
  });

  test('route: the plan of an idempotent route; pass-through for passthrough routes and other methods', async () => {
    const pay = await run([routePhase], '/pay/1');
    assert.deepEqual(pay.verdicts, [{ kind: 'next' }]);
    assert.deepEqual(pay.ctx.plan, ['body', 'identify', 'claim', 'forward', 'commit'], 'no lookaside without a cache');
    assert.deepEqual((await run([routePhase], '/elsewhere')).verdicts, [{ kind: 'forward', outcome: 'passthrough' }]);
    assert.deepEqual((await run([routePhase], '/pay/1', { method: 'GET' })).verdicts, [{ kind: 'forward', outcome: 'passthrough' }]);
    deps = { ...deps, plans: plans(true) } as LifecycleDeps;
    try {
      assert.deepEqual((await run([routePhase], '/pay/1')).ctx.plan, ['body', 'identify', 'lookaside', 'claim', 'forward', 'commit']);
      assert.deepEqual((await run([routePhase], '/watch/1')).ctx.plan, ['body', 'identify', 'claim', 'forward', 'commit'], 'shadow routes skip the lookaside');
    } finally {
      deps = { ...deps, plans: plans(false) } as LifecycleDeps;
    }
  });

  test('body: over maxBodyBytes is 413 with the connection closed, by Content-Length or by chunks; within it goes on', async () => {
    const big = await run([routePhase, bodyPhase], '/pay/1', { body: 'x'.repeat(17) });
    assert.deepEqual(big.verdicts.at(-1), { kind: 'problem', slug: 'body-too-large', status: 413, close: true });
    const r = await rawRequest(url, `POST /pay/1 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n10\r\n${'y'.repeat(16)}\r\n1\r\nz\r\n0\r\n\r\n`);
    assert.deepEqual(r.json().verdicts.at(-1), { kind: 'problem', slug: 'body-too-large', status: 413, close: true });
    assert.deepEqual((await run([routePhase, bodyPhase], '/pay/1', { body: 'x'.repeat(16) })).verdicts.at(-1), { kind: 'next' });
  });

  test('identify: key, tenant and fingerprint; the same request twice has the same fingerprint, another body another', async () => {
    const list = [routePhase, bodyPhase, identifyPhase];
    const a = await run(list, '/pay/1', { headers: { 'idempotency-key': '"k-1"', authorization: 'Bearer t' }, body: '{"a":1}' });
    assert.deepEqual(a.verdicts.at(-1), { kind: 'next' });
    assert.equal(a.ctx.key, 'k-1', 'a Structured Field string is the same key as the bare one');
    assert.match(a.ctx.tenantId, /^[0-9a-f]{64}$/, 'the default tenant: a hash of the credential');
    const again = await run(list, '/pay/1', { headers: { 'idempotency-key': 'k-1', authorization: 'Bearer t' }, body: '{"a":1}' });
    assert.equal(again.ctx.fingerprint, a.ctx.fingerprint);
    const other = await run(list, '/pay/1', { headers: { 'idempotency-key': 'k-1', authorization: 'Bearer t' }, body: '{"a":2}' });
    assert.notEqual(other.ctx.fingerprint, a.ctx.fingerprint);
  });

  test('identify: every refusal, and pass-through where no key is needed', async () => {
    const list = [routePhase, bodyPhase, identifyPhase];
    const last = async (path: string, opts: Parameters<typeof send>[1]): Promise<Record<string, unknown>> => (await run(list, path, opts)).verdicts.at(-1)!;
    assert.deepEqual(await last('/pay/1', { body: '{}' }), { kind: 'problem', slug: 'key-missing', status: 400, close: false });
    assert.deepEqual(await last('/pay/1', { headers: { 'idempotency-key': ['a', 'b'] }, body: '{}' }), { kind: 'problem', slug: 'key-malformed', status: 400, close: false });
    assert.deepEqual(await last('/opt/1', { body: '{}' }), { kind: 'forward', outcome: 'passthrough' });
    assert.deepEqual(await last('/hooks/1', { body: 'not json' }), { kind: 'problem', slug: 'key-body-not-json', status: 400, close: false });
    assert.deepEqual(await last('/hooks/1', { body: '{"event":{}}' }), { kind: 'problem', slug: 'key-pointer-missing', status: 400, close: false });
    const hook = await run(list, '/hooks/1', { body: '{"event":{"id":"evt_1"}}' });
    assert.equal(hook.ctx.key, 'evt_1', 'the body key through the pointer compiled at start-up');
  });

  test('identify on a shadow route: what enforcement would refuse is forwarded and counted', async () => {
    const seen = await run([routePhase, bodyPhase, identifyPhase], '/watch/1', { body: '{}' });
    assert.deepEqual(seen.verdicts.at(-1), { kind: 'forward', outcome: 'passthrough' });
    assert.equal(seen.ctx.shadow, 'rejected');
    const counted = (await metrics.shadowDecisions.get()).values.find((v) => v.labels.route === 'watch' && v.labels.decision === 'rejected');
    assert.equal(counted?.value, 1);
  });
});
