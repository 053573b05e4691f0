import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import pg from 'pg';
import { once } from 'node:events';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { attr, durationNs, startReceiver, type Receiver } from '../helpers/otlp.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { deletePrefix, sharedRedis, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { LOADED_MACHINE_TIMEOUT_MS, cacheCounts } from '../cache/helpers/proxy.js';

// docs/operations.md, Tracing: the real OpenTelemetry SDK exports OTLP/HTTP
// (protobuf by default, JSON when asked) to a receiver this test runs
// (test/helpers/otlp.ts); what arrives is decoded and checked.

const CLIENT_TRACE = '0af7651916cd43dd8448eb211c80319c';
const CLIENT_SPAN = 'b7ad6b7169203331';

describe('tracing on: spans exported over OTLP/HTTP', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let receiver: Receiver;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201, 20));
    receiver = await startReceiver();
  });
  after(async () => {
    await upstream.close();
    await receiver.close();
    await db.drop();
  });

  test('a request and its replay: server, claim, upstream and commit spans; the replay links to the execution', async () => {
    const proxy = await startTestProxy({
      upstream: upstream.url, databaseUrl: db.url,
      yaml: `tracing: { endpoint: ${JSON.stringify(receiver.url)}, serviceName: proxy-under-test }\n`,
    });
    const key = `trace-${Date.now()}`;
    const headers = { 'idempotency-key': key, 'content-type': 'application/json', traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`, tracestate: 'vendor=abc' };
    let first;
    let second;
    try {
      first = await send(`${proxy.url}/orders`, { headers, body: '{"amount":1}' });
      second = await send(`${proxy.url}/orders`, { headers: { ...headers, traceparent: '00-11111111111111111111111111111111-2222222222222222-01' }, body: '{"amount":1}' });
    } finally {
      await proxy.close(); // flushes the batch processor
    }
    assert.equal(first.status, 201);
    assert.equal(second.status, 201);
    assert.equal(second.headers['idempotent-replayed'], 'true');
    assert.equal(second.headers['idempotency-proxy-trace'], undefined, 'the stored trace context is never replayed');
    assert.ok(receiver.contentTypes.length > 0 && receiver.contentTypes.every((c) => c.startsWith('POST /v1/traces application/x-protobuf')), receiver.contentTypes.join('; '));

    const servers = receiver.spans.filter((s) => s.kind === 2);
    assert.equal(servers.length, 2, `one server span per request: ${receiver.spans.map((s) => s.name).join(', ')}`);
    const exec = servers.find((s) => s.traceId === CLIENT_TRACE)!;
    assert.ok(exec, 'the first request continues the client trace');
    assert.equal(exec.parentSpanId, CLIENT_SPAN, "the server span's parent is the client's span");
    assert.equal(attr(exec, 'idempotency.route'), 'default');
    assert.equal(attr(exec, 'idempotency.outcome'), 'executed');
    assert.equal(attr(exec, 'idempotency.replayed'), false);
    assert.match(String(attr(exec, 'idempotency.key_hash')), /^[0-9a-f]{12}$/);
    assert.notEqual(attr(exec, 'idempotency.key_hash'), key);

    const children = receiver.spans.filter((s) => s.traceId === CLIENT_TRACE && s.parentSpanId === exec.spanId);
    const byName = new Map(children.map((s) => [s.name, s]));
    for (const name of ['claim', 'upstream', 'commit']) {
      const s = byName.get(name);
      assert.ok(s, `a ${name} span under the server span (got ${[...byName.keys()].join(', ')})`);
      assert.ok(durationNs(s) > 0n, `${name} has a duration`);
    }
    assert.ok(durationNs(byName.get('upstream')!) >= 15_000_000n, 'the upstream span covers the upstream delay (20 ms)');
    // The upstream call's span is written when the call ends, from a head compiled per method and status code.
    assert.equal(byName.get('upstream')!.kind, 3, 'the upstream call is a client span');
    assert.equal(attr(byName.get('upstream')!, 'http.request.method'), 'POST');
    assert.equal(Number(attr(byName.get('upstream')!, 'http.response.status_code')), 201);
    assert.equal(byName.get('upstream')!.status?.code ?? 0, 0, 'an answered call has no error status');

    // What the upstream received: the proxy's upstream span as parent, the client's tracestate, one traceparent.
    const got = upstream.received.find((r) => r.headers['idempotency-key'] === key)!;
    const lines = got.rawHeaders.filter((_, i) => i % 2 === 0 && got.rawHeaders[i]!.toLowerCase() === 'traceparent');
    assert.equal(lines.length, 1, 'one traceparent upstream: the client one is replaced');
    assert.equal(got.headers.traceparent, `00-${CLIENT_TRACE}-${byName.get('upstream')!.spanId}-01`);
    assert.equal(got.headers.tracestate, 'vendor=abc');

    const replay = servers.find((s) => s.traceId === '11111111111111111111111111111111')!;
    assert.ok(replay, 'the replay continues its own client trace');
    assert.equal(attr(replay, 'idempotency.outcome'), 'replayed');
    assert.equal(attr(replay, 'idempotency.replayed'), true);
    assert.deepEqual(replay.links?.map((l) => [l.traceId, l.spanId]), [[CLIENT_TRACE, exec.spanId]], 'the replay links to the execution it replays');
    assert.equal(upstream.executions(), 1);

    // The store spans are made when their round trip has ended (src/lifecycle/phases/claim.ts): each still spans
    // its round trip, in the request's order — claim, then upstream, then commit — inside the server span.
    const at = (s: { startTimeUnixNano: string | number; endTimeUnixNano: string | number }): [bigint, bigint] => [BigInt(s.startTimeUnixNano), BigInt(s.endTimeUnixNano)];
    const [serverStart, serverEnd] = at(exec);
    const [claimStart, claimEnd] = at(byName.get('claim')!);
    const [upstreamStart, upstreamEnd] = at(byName.get('upstream')!);
    const [commitStart, commitEnd] = at(byName.get('commit')!);
    assert.ok(serverStart <= claimStart && claimEnd <= upstreamStart, 'the claim span ends before the upstream call starts');
    assert.ok(upstreamEnd <= commitStart && commitEnd <= serverEnd, 'the commit span starts after the upstream call and ends inside the server span');
  });

  test('an upstream that cannot be reached: the key is released, and the release is a span of the request', async () => {
    const closed = await startUpstream(jsonResponder(201));
    const unreachable = closed.url;
    await closed.close();
    const proxy = await startTestProxy({
      upstream: unreachable, databaseUrl: db.url,
      yaml: `tracing: { endpoint: ${JSON.stringify(receiver.url)}, serviceName: proxy-under-test }\n`,
    });
    const trace = '33333333333333333333333333333333';
    let res;
    try {
      res = await send(`${proxy.url}/orders`, {
        headers: { 'idempotency-key': `release-${Date.now()}`, 'content-type': 'application/json', traceparent: `00-${trace}-4444444444444444-01` },
        body: '{"amount":1}',
      });
    } finally {
      await proxy.close();
    }
    assert.equal(res.status, 502, 'not sent: the key is released and the client told to retry');
    const spans = receiver.spans.filter((s) => s.traceId === trace);
    const server = spans.find((s) => s.kind === 2);
    assert.ok(server, `a server span (got ${spans.map((s) => s.name).join(', ')})`);
    const names = spans.filter((s) => s.parentSpanId === server.spanId).map((s) => s.name).sort();
    assert.deepEqual(names, ['claim', 'release', 'upstream'], 'claim, the failed upstream call, and the release');
    const release = spans.find((s) => s.name === 'release')!;
    const upstreamCall = spans.find((s) => s.name === 'upstream')!;
    assert.ok(BigInt(upstreamCall.endTimeUnixNano) <= BigInt(release.startTimeUnixNano), 'the release comes after the upstream call');
    assert.equal(upstreamCall.status?.code, 2, `the failed upstream call has an error status (got ${JSON.stringify(upstreamCall.status)})`);
    assert.ok((upstreamCall.status?.message ?? '').length > 0, 'with why it failed');
    assert.equal(attr(upstreamCall, 'http.request.method'), 'POST');
    assert.equal(attr(upstreamCall, 'http.response.status_code'), undefined, 'no answer: no status code');
    assert.ok(durationNs(upstreamCall) > 0n, 'the failed call has a duration');
    assert.ok(durationNs(release) > 0n, 'the release span covers its round trip');
  });

  test('a claim the store does not answer in time: the claim span carries the error, a child of the server span', async () => {
    const proxy = await startTestProxy({
      upstream: upstream.url, databaseUrl: db.url,
      yaml: `store: { timeout: 300ms }\ntracing: { endpoint: ${JSON.stringify(receiver.url)}, serviceName: proxy-under-test }\n`,
    });
    const trace = '55555555555555555555555555555555';
    // This test's own database: its table locked by a transaction of the test's, so the claim waits past store.timeout.
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    let res;
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE');
      res = await send(`${proxy.url}/orders`, {
        headers: { 'idempotency-key': `unanswered-${Date.now()}`, 'content-type': 'application/json', traceparent: `00-${trace}-6666666666666666-01` },
        body: '{"amount":1}',
      });
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      await holder.end();
      await proxy.close();
    }
    assert.equal(res.status, 503, 'the store did not answer: nothing forwarded');
    assert.equal(upstream.received.filter((r) => String(r.headers.traceparent ?? '').includes(trace)).length, 0, 'nothing reached the upstream');
    const spans = receiver.spans.filter((s) => s.traceId === trace);
    const server = spans.find((s) => s.kind === 2);
    assert.ok(server, `a server span (got ${spans.map((s) => s.name).join(', ')})`);
    const claims = spans.filter((s) => s.name === 'claim');
    assert.equal(claims.length, 1, `one claim span (got ${spans.map((s) => s.name).join(', ')})`);
    const claim = claims[0]!;
    assert.equal(claim.parentSpanId, server.spanId);
    assert.equal(claim.kind, 3, 'a client span');
    assert.equal(claim.status?.code, 2, `an error status (got ${JSON.stringify(claim.status)})`);
    assert.ok((claim.status?.message ?? '').length > 0, 'with the store error\'s message');
    assert.equal(attr(claim, 'idempotency.claim'), undefined, 'no claim outcome: the claim got no answer');
    assert.ok(durationNs(claim) >= 250_000_000n, `the span covers the wait (${durationNs(claim)} ns)`);
  });
});

// A commit and a release the store refuses (SQL errors, not an outage: no retry) are spans of their request with
// the error as their status, as a claim that got no answer is (above). The refusals are row triggers on this
// test's own database.
describe('tracing on: a commit and a release the store refuses', () => {
  let db: TestDatabase;
  let receiver: Receiver;
  before(async () => {
    db = await createTestDatabase();
    receiver = await startReceiver();
  });
  after(async () => {
    await receiver.close();
    await db.drop();
  });

  const refuse = async (): Promise<void> => {
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      await c.query(`CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test (%)', TG_OP; END $$`);
      await c.query(`CREATE TRIGGER test_refuse_commit BEFORE UPDATE ON idempotency_keys FOR EACH ROW WHEN (NEW.state = 'complete') EXECUTE FUNCTION test_refuse()`);
      await c.query('CREATE TRIGGER test_refuse_release BEFORE DELETE ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION test_refuse()');
    } finally {
      await c.end();
    }
  };

  const storeSpan = (trace: string, name: string) => {
    const spans = receiver.spans.filter((s) => s.traceId === trace);
    const server = spans.find((s) => s.kind === 2);
    assert.ok(server, `a server span (got ${spans.map((s) => s.name).join(', ')})`);
    const found = spans.filter((s) => s.name === name);
    assert.equal(found.length, 1, `one ${name} span (got ${spans.map((s) => s.name).join(', ')})`);
    assert.equal(found[0]!.parentSpanId, server.spanId, `the ${name} span is a child of the server span`);
    assert.equal(found[0]!.kind, 3, 'a client span');
    return found[0]!;
  };

  test('the commit span and the release span carry the store\'s error', async () => {
    const upstream = await startUpstream(jsonResponder(201));
    const closed = await startUpstream(jsonResponder(201));
    const unreachable = closed.url;
    await closed.close();
    const yaml = `tracing: { endpoint: ${JSON.stringify(receiver.url)} }\n`;
    const committing = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml });
    const releasing = await startTestProxy({ upstream: unreachable, databaseUrl: db.url, yaml });
    const commitTrace = '77777777777777777777777777777777';
    const releaseTrace = '88888888888888888888888888888888';
    let released;
    try {
      await refuse();
      // The client gets no complete response when its record cannot be committed: how it ends is not this test's.
      await send(`${committing.url}/orders`, {
        headers: { 'idempotency-key': `refused-commit-${Date.now()}`, 'content-type': 'application/json', traceparent: `00-${commitTrace}-1111111111111111-01` },
        body: '{"amount":1}',
      }).catch(() => undefined);
      released = await send(`${releasing.url}/orders`, {
        headers: { 'idempotency-key': `refused-release-${Date.now()}`, 'content-type': 'application/json', traceparent: `00-${releaseTrace}-2222222222222222-01` },
        body: '{"amount":1}',
      });
    } finally {
      await committing.close();
      await releasing.close();
      await upstream.close();
    }
    assert.equal(upstream.received.length, 1, 'the first request reached the upstream');
    assert.equal(released.status, 502, 'the second was not sent: the client is told so');
    const commit = storeSpan(commitTrace, 'commit');
    assert.equal(commit.status?.code, 2, `the commit span has an error status (got ${JSON.stringify(commit.status)})`);
    assert.match(commit.status?.message ?? '', /refused by the test \(UPDATE\)/);
    assert.ok(durationNs(commit) > 0n, 'the commit span covers its round trip');
    const release = storeSpan(releaseTrace, 'release');
    assert.equal(release.status?.code, 2, `the release span has an error status (got ${JSON.stringify(release.status)})`);
    assert.match(release.status?.message ?? '', /refused by the test \(DELETE\)/);
  });
});

// A server span's head (src/tracing/spans.ts) is compiled once per route, outcome, phase and status code:
// requests that differ in their status alone, one right after the other, each carry their own.
describe('tracing on: the server span carries each response\'s own status code', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let receiver: Receiver;
  before(async () => {
    db = await createTestDatabase();
    // Answers with the status the path ends in: /status/202 → 202.
    upstream = await startUpstream((req, n, res) => jsonResponder(Number(req.url.split('/').pop()))(req, n, res));
    receiver = await startReceiver();
  });
  after(async () => {
    await upstream.close();
    await receiver.close();
    await db.drop();
  });

  test('executions and replays answered 201, 202, 201, 200 on one route: four status codes, in order', async () => {
    const proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: `tracing: { endpoint: ${JSON.stringify(receiver.url)} }\n` });
    const statuses = [201, 202, 201, 200];
    const run = `${Date.now()}`;
    const traces = statuses.map((_, i) => `${(i + 1).toString(16)}`.repeat(32));
    try {
      for (const pass of [0, 1]) {
        for (let i = 0; i < statuses.length; i++) {
          const r = await send(`${proxy.url}/status/${statuses[i]}`, {
            headers: { 'idempotency-key': `status-${run}-${i}`, 'content-type': 'application/json', traceparent: `00-${traces[i]}-${String(pass + 1).repeat(16)}-01` },
            body: '{}',
          });
          assert.equal(r.status, statuses[i]);
          assert.equal(r.headers['idempotent-replayed'], pass === 1 ? 'true' : undefined);
        }
      }
    } finally {
      await proxy.close();
    }
    for (let i = 0; i < statuses.length; i++) {
      const servers = receiver.spans.filter((s) => s.traceId === traces[i] && s.kind === 2);
      assert.deepEqual(servers.map((s) => [attr(s, 'idempotency.outcome'), attr(s, 'http.response.status_code')]).sort(),
        [['executed', String(statuses[i])], ['replayed', String(statuses[i])]], `request ${i}: ${statuses[i]}`);
    }
  });

  // The server span's url.path is compiled once per route while its requests repeat one path, written as text
  // when it changes, and a path seen twice in a row becomes the compiled one (RequestTracing.writePath).
  test('one route, paths that repeat and change: each server span carries its own request\'s url.path', async () => {
    const proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: `tracing: { endpoint: ${JSON.stringify(receiver.url)} }\n` });
    const statuses = [201, 201, 201, 202, 202, 201, 200, 200, 201, 202];
    const run = `${Date.now()}`;
    const traces = statuses.map((_, i) => (i + 0xa0).toString(16).repeat(16));
    try {
      for (let i = 0; i < statuses.length; i++) {
        const r = await send(`${proxy.url}/status/${statuses[i]}`, {
          headers: { 'idempotency-key': `path-${run}-${i}`, 'content-type': 'application/json', traceparent: `00-${traces[i]}-${'1'.repeat(16)}-01` },
          body: '{}',
        });
        assert.equal(r.status, statuses[i]);
      }
    } finally {
      await proxy.close();
    }
    const paths = traces.map((t) => receiver.spans.filter((s) => s.traceId === t && s.kind === 2).map((s) => attr(s, 'url.path')));
    assert.deepEqual(paths, statuses.map((s) => [`/status/${s}`]));
  });
});

// The trace context has a column of its own in PostgreSQL (migration 8); the Redis cache keeps it as the
// reserved last entry of the cached headers (src/store/cache-codec.ts). Replays answered from either link
// to the execution.
describe('tracing on with the Redis cache: replays from PostgreSQL and from the cache link to the execution', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let receiver: Receiver;
  const prefix = uniquePrefix();
  before(async () => {
    await (await sharedRedis()).quit();
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201));
    receiver = await startReceiver();
  });
  after(async () => {
    await upstream?.close();
    await receiver?.close();
    await db?.drop();
    const redis = await sharedRedis();
    await deletePrefix(redis, prefix);
    await redis.quit();
  });

  test('three replays, the cached ones among them, each link to the span of the execution; none carries the trace context', async () => {
    const proxy = await startTestProxy({
      upstream: upstream.url, databaseUrl: db.url, redisUrl: SHARED_REDIS_URL,
      yaml: `tracing: { endpoint: ${JSON.stringify(receiver.url)} }\n`,
      start: { redisCache: { prefix, commandTimeoutMs: LOADED_MACHINE_TIMEOUT_MS } },
    });
    const key = `trace-cache-${Date.now()}`;
    const req = (trace: string) => ({ headers: { 'idempotency-key': key, 'content-type': 'application/json', traceparent: `00-${trace}-${'3'.repeat(16)}-01` }, body: '{}' });
    const replays = ['a', 'b', 'c'].map((c) => c.repeat(32));
    let hits: number;
    try {
      assert.equal((await send(`${proxy.url}/orders`, req(CLIENT_TRACE))).status, 201);
      const before = (await cacheCounts(proxy.metrics)).hit;
      for (const t of replays) {
        const r = await send(`${proxy.url}/orders`, req(t));
        assert.equal(r.headers['idempotent-replayed'], 'true');
        assert.ok(!Object.keys(r.headers).some((n) => n.startsWith('idempotency-proxy-')), JSON.stringify(r.headers));
      }
      hits = (await cacheCounts(proxy.metrics)).hit - before;
    } finally {
      await proxy.close();
    }
    assert.ok(hits >= 2, `at least two replays came from the cache (${hits})`);
    const exec = receiver.spans.find((s) => s.traceId === CLIENT_TRACE && s.kind === 2)!;
    assert.ok(exec, 'the execution span');
    for (const t of replays) {
      const span = receiver.spans.find((s) => s.traceId === t && s.kind === 2);
      assert.ok(span, `the replay span of trace ${t}`);
      assert.deepEqual(span.links?.map((l) => [l.traceId, l.spanId]), [[CLIENT_TRACE, exec.spanId]], `replay ${t} links to the execution`);
    }
    assert.equal(upstream.executions(), 1);
  });
});

describe('tracing on: waits, pass-through, OTLP/JSON', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let receiver: Receiver;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201, 150));
    receiver = await startReceiver();
  });
  after(async () => {
    await upstream.close();
    await receiver.close();
    await db.drop();
  });

  const yaml = (extra = ''): string => `
tracing: { endpoint: ${JSON.stringify(receiver.url)}${extra} }
routes:
  - name: wait
    match: { path: /wait/** }
    onInFlight: wait
    waitTimeout: 5s
  - name: pass
    match: { path: /pass/** }
    mode: passthrough
`;
  const tp = (trace: string): string => `00-${trace}-${'3'.repeat(16)}-01`;

  test('a waiter (onInFlight: wait): a wait span, and its claim again as a claim span', async () => {
    const proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: yaml() });
    const key = `wait-${Date.now()}`;
    const traces = ['a'.repeat(32), 'b'.repeat(32)];
    let answers;
    try {
      // At the same moment: one claims and runs (150 ms upstream), the other finds it in flight and waits.
      answers = await Promise.all(traces.map((t) => send(`${proxy.url}/wait/x`, { headers: { 'idempotency-key': key, 'content-type': 'application/json', traceparent: tp(t) }, body: '{}' })));
    } finally {
      await proxy.close();
    }
    assert.deepEqual(answers.map((a) => a.status), [201, 201]);
    assert.equal(upstream.executions(), 1);
    const waiterTrace = traces[answers.findIndex((a) => a.headers['idempotent-replayed'] === 'true')]!;
    assert.ok(waiterTrace, 'one of the two was replayed');
    const spans = receiver.spans.filter((s) => s.traceId === waiterTrace);
    const server = spans.find((s) => s.kind === 2)!;
    assert.equal(attr(server, 'idempotency.outcome'), 'replayed');
    const wait = spans.find((s) => s.name === 'wait');
    assert.ok(wait, `a wait span (got ${spans.map((s) => s.name).join(', ')})`);
    assert.equal(wait.parentSpanId, server.spanId);
    assert.equal(attr(wait, 'idempotency.claim'), 'complete');
    assert.ok(durationNs(wait) >= 50_000_000n, 'the wait span covers the wait for the first request');
    const claims = spans.filter((s) => s.name === 'claim');
    assert.deepEqual(claims.map((c) => [attr(c, 'idempotency.claim'), attr(c, 'idempotency.reclaim') ?? false]), [['in_flight', false], ['complete', true]],
      'the first claim found the key in flight; the claim again found it complete');
  });

  test('a pass-through route: a server span, and the client traceparent goes upstream untouched', async () => {
    const proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: yaml() });
    const trace = 'c'.repeat(32);
    let r;
    try {
      r = await send(`${proxy.url}/pass/x`, { headers: { traceparent: tp(trace) } });
    } finally {
      await proxy.close();
    }
    assert.equal(r.status, 201);
    const server = receiver.spans.filter((s) => s.traceId === trace && s.kind === 2);
    assert.equal(server.length, 1, 'one server span');
    assert.equal(server[0]!.parentSpanId, '3'.repeat(16));
    assert.equal(attr(server[0]!, 'idempotency.route'), 'pass');
    assert.equal(attr(server[0]!, 'idempotency.outcome'), 'passthrough');
    const got = upstream.received.find((x) => x.headers.traceparent?.includes(trace));
    assert.equal(got?.headers.traceparent, tp(trace));
  });

  test('protocol: http/json exports OTLP/JSON (only that exporter is loaded)', async () => {
    const before = receiver.contentTypes.length;
    const proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: yaml(', protocol: http/json') });
    const trace = 'd'.repeat(32);
    try {
      await send(`${proxy.url}/pass/x`, { headers: { traceparent: tp(trace) } });
    } finally {
      await proxy.close();
    }
    const types = receiver.contentTypes.slice(before);
    assert.ok(types.length > 0 && types.every((c) => c.startsWith('POST /v1/traces application/json')), types.join('; '));
    assert.equal(receiver.spans.filter((s) => s.traceId === trace && s.kind === 2).length, 1);
  });
});

const here = path.dirname(fileURLToPath(import.meta.url));
const APP = path.resolve(here, '../../src/app.js');
const LOAD = path.resolve(here, '../../src/config/load.js');

/** Starts the proxy in a fresh process and reports which @opentelemetry modules it loaded. */
async function loadedModules(upstreamUrl: string, dbUrl: string, yaml: string): Promise<string[]> {
  const script = `
    import { createRequire } from 'node:module';
    const { startProxy } = await import(${JSON.stringify(APP)});
    const { loadConfig } = await import(${JSON.stringify(LOAD)});
    const { createLogger } = await import(${JSON.stringify(path.resolve(here, '../../src/log/logger.js'))});
    const config = loadConfig({ text: ${JSON.stringify(yaml)}, flags: { upstream: ${JSON.stringify(upstreamUrl)}, listen: '127.0.0.1:0', admin: false, databaseUrl: ${JSON.stringify(dbUrl)} }, env: {} });
    const proxy = await startProxy(config, { logger: createLogger('silent') });
    await fetch(proxy.url + '/orders', { method: 'POST', headers: { 'idempotency-key': 'k-' + Date.now(), 'content-type': 'application/json' }, body: '{}' });
    const cache = createRequire(import.meta.url).cache;
    const loaded = Object.keys(cache).filter((k) => k.includes('@opentelemetry')).map((k) => k.split('@opentelemetry/')[1].split('/')[0]);
    await proxy.close();
    process.stdout.write(JSON.stringify([...new Set(loaded)].sort()));
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH ?? '' } });
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => { out += c.toString(); });
  child.stderr.on('data', (c: Buffer) => { err += c.toString(); });
  const [code] = await once(child, 'exit');
  assert.equal(code, 0, err);
  return JSON.parse(out) as string[];
}

describe('tracing off: no OpenTelemetry module, no exporter', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream();
  });
  after(async () => {
    await upstream.close();
    await db.drop();
  });

  test('an unreachable collector does not fail the shutdown', async () => {
    const proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: 'tracing: { endpoint: "http://127.0.0.1:9" }\n' });
    const r = await send(`${proxy.url}/orders`, { headers: { 'idempotency-key': `down-${Date.now()}`, 'content-type': 'application/json' }, body: '{}' });
    assert.equal(r.status, 201);
    await proxy.close();
  });

  test('off: no OpenTelemetry module of ours is loaded; on: the OTLP exporter and the resource detection are', async () => {
    const off = await loadedModules(upstream.url, db.url, '');
    // prom-client loads @opentelemetry/api itself (its process CPU metric looks for a span to make an exemplar of).
    assert.deepEqual(off.filter((m) => m !== 'api'), [], `modules loaded with tracing off: ${off.join(', ')}`);
    const receiver = await startReceiver();
    let on: string[];
    try {
      on = await loadedModules(upstream.url, db.url, `tracing: { endpoint: ${JSON.stringify(receiver.url)} }\n`);
    } finally {
      await receiver.close();
    }
    assert.ok(['otlp-exporter-base', 'resources', 'core'].every((m) => on.includes(m)), `modules loaded with tracing on: ${on.join(', ')}`);
  });
});
