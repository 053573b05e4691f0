import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { attr, startReceiver, type Receiver } from '../helpers/otlp.js';
import type { RunningProxy } from '../../src/app.js';
import { spawnFromYaml, startTestProxy } from '../helpers/proxy.js';
import { waitFor } from '../helpers/wait.js';
import { retryWhileInFlight, trySend } from '../faults/helpers/client.js';
import { startControlledUpstream, type ControlledUpstream } from '../faults/helpers/controlled-upstream.js';
import { tempDir, type TempDir } from '../helpers/tmp.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { cliInProcess } from '../ops/support.js';

// docs/operations.md, Tracing: a sampled execution's record keeps its trace
// context in a column of its own (migration 8), an unsampled one's none;
// records stored before migration 8 keep it as a reserved entry among their
// headers, and still link. keys show and the admin API show the response's
// own headers without any reserved (idempotency-proxy-*) entry, and the
// stored trace context as its own field.

const TOKEN = 'trace-admin-token';
const TRACE = 'e'.repeat(32);

describe('the stored trace context in keys show and the admin API', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let receiver: Receiver;
  let proxy: RunningProxy;
  let dir: TempDir;
  let file: string;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201));
    receiver = await startReceiver();
    dir = tempDir();
    const yaml = `adminToken: ${TOKEN}\ntracing: { endpoint: ${JSON.stringify(receiver.url)} }\nroutes:\n  - name: pay\n    match: { path: /pay/** }\n    tenant: { constant: t1 }\n`;
    file = dir.write('proxy.yaml', `${yaml}upstream: { url: ${JSON.stringify(upstream.url)} }\nstore: { postgres: ${JSON.stringify(db.url)} }\n`);
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml });
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await receiver?.close();
    await db?.drop();
    dir?.remove();
  });

  const admin = (path: string) => send(`${proxy.adminUrl}${path}`, { method: 'GET', headers: { authorization: `Bearer ${TOKEN}` } });

  test('a traced execution: no reserved header in show or list, its traceparent as `trace`', async () => {
    const r = await send(`${proxy.url}/pay/1`, { headers: { 'idempotency-key': 'traced-1', 'content-type': 'application/json', traceparent: `00-${TRACE}-${'4'.repeat(16)}-01` }, body: '{}' });
    assert.equal(r.status, 201);
    const [row] = await sql<{ response_headers: Array<[string, string]>; trace_context: string | null }>(db.url,
      'SELECT response_headers, trace_context FROM idempotency_keys WHERE idem_key = $1', ['traced-1']);
    assert.match(String(row!.trace_context), new RegExp(`^00-${TRACE}-[0-9a-f]{16}-01$`), 'the record keeps the trace context in its column');
    assert.deepEqual(row!.response_headers.filter(([n]) => n.startsWith('idempotency-proxy-')), [], 'and not among its headers');

    const shown = await admin('/admin/keys/t1/traced-1');
    assert.equal(shown.status, 200, shown.text());
    const view = shown.json() as { responseHeaders: Array<[string, string]>; trace: string | null };
    assert.deepEqual(view.responseHeaders.filter(([n]) => n.startsWith('idempotency-proxy-')), [], JSON.stringify(view.responseHeaders));
    assert.ok(view.responseHeaders.some(([n]) => n === 'content-type'), 'the response headers are still shown');
    assert.equal(view.trace, row!.trace_context);

    const listed = await admin('/admin/keys?tenantId=t1&body=true');
    const k = (listed.json() as { keys: Array<{ key: string; responseHeaders: Array<[string, string]>; trace: string }> }).keys.find((x) => x.key === 'traced-1')!;
    assert.ok(!JSON.stringify(k.responseHeaders).includes('idempotency-proxy-'));
    assert.equal(k.trace, view.trace);

    const cli = await cliInProcess(['keys', 'show', '--config', file, '--tenant-id', 't1', '--key', 'traced-1']);
    assert.equal(cli.code, 0, cli.stderr);
    const rec = JSON.parse(cli.stdout) as { responseHeaders: Array<[string, string]>; trace: string };
    assert.ok(!JSON.stringify(rec.responseHeaders).includes('idempotency-proxy-'), cli.stdout);
    assert.equal(rec.trace, view.trace);
  });

  test('an unsampled execution keeps no trace context: the upstream still gets its traceparent, the record none, a sampled replay no link', async () => {
    // The client's parent says "not sampled": the proxy follows it (parent-based), records no span and stores none.
    const unsampled = 'a'.repeat(32);
    const body = { headers: { 'idempotency-key': 'unsampled-3', 'content-type': 'application/json', traceparent: `00-${unsampled}-${'8'.repeat(16)}-00` }, body: '{}' };
    const seen = upstream.received.length;
    assert.equal((await send(`${proxy.url}/pay/3`, body)).status, 201);
    const forwarded = upstream.received.slice(seen).find((r) => r.url === '/pay/3');
    assert.match(String(forwarded?.headers.traceparent), new RegExp(`^00-${unsampled}-[0-9a-f]{16}-00$`), 'the upstream gets the unsampled trace context');
    const [row] = await sql<{ trace_context: string | null }>(db.url, 'SELECT trace_context FROM idempotency_keys WHERE idem_key = $1', ['unsampled-3']);
    assert.equal(row!.trace_context, null, 'the record keeps no trace context of an unsampled execution');
    assert.equal(((await admin('/admin/keys/t1/unsampled-3')).json() as { trace: string | null }).trace, null);
    // A sampled retry replays it; its span has no link (nothing was recorded to link to).
    const replayTrace = '9'.repeat(32);
    const replay = await send(`${proxy.url}/pay/3`, { ...body, headers: { ...body.headers, traceparent: `00-${replayTrace}-${'7'.repeat(16)}-01` } });
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    const span = await waitFor('the replay span', () => receiver.spans.find((s) => s.traceId === replayTrace && s.kind === 2), 10_000);
    assert.deepEqual(span.links ?? [], []);
    assert.equal(receiver.spans.some((s) => s.traceId === unsampled), false, 'nothing of the unsampled execution was exported');
  });

  test('a record stored before migration 8 (its trace context a reserved entry): every idempotency-proxy-* entry hidden, the entry shown as `trace`, a replay links to it', async () => {
    // A real execution's row, rewritten into the layout of a record stored before migration 8.
    const body = { headers: { 'idempotency-key': 'reserved-2', 'content-type': 'application/json' }, body: '{}' };
    assert.equal((await send(`${proxy.url}/pay/2`, body)).status, 201);
    await sql(db.url, `
      UPDATE idempotency_keys SET trace_context = NULL,
             response_headers = '[["content-type","text/plain"],["idempotency-proxy-trace","00-${TRACE}-${'5'.repeat(16)}-01"],["idempotency-proxy-other","x"]]'::jsonb
       WHERE tenant_id = 't1' AND idem_key = 'reserved-2'`);
    const shown = (await admin('/admin/keys/t1/reserved-2')).json() as { responseHeaders: Array<[string, string]>; trace: string };
    assert.deepEqual(shown.responseHeaders, [['content-type', 'text/plain']]);
    assert.equal(shown.trace, `00-${TRACE}-${'5'.repeat(16)}-01`);
    const cli = await cliInProcess(['keys', 'show', '--config', file, '--tenant-id', 't1', '--key', 'reserved-2']);
    assert.equal(cli.code, 0, cli.stderr);
    assert.deepEqual((JSON.parse(cli.stdout) as { responseHeaders: unknown }).responseHeaders, [['content-type', 'text/plain']]);
    // A replay never carries them either, and its span links to the span the entry names.
    const replayTrace = '6'.repeat(32);
    const replay = await send(`${proxy.url}/pay/2`, { ...body, headers: { ...body.headers, traceparent: `00-${replayTrace}-${'7'.repeat(16)}-01` } });
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.ok(!Object.keys(replay.headers).some((n) => n.startsWith('idempotency-proxy-')), JSON.stringify(replay.headers));
    const span = await waitFor('the replay span', () => receiver.spans.find((s) => s.traceId === replayTrace && s.kind === 2), 10_000);
    assert.deepEqual(span.links?.map((l) => [l.traceId, l.spanId]), [[TRACE, '5'.repeat(16)]]);
  });
});

// A probe-recorded answer (onExpiredLease: probe, found): the record is made
// by the request that probed, so it keeps that request's trace context, and a
// later replay links to the span that recorded it. The holder is a real child
// proxy, SIGKILLed while the upstream holds its POST.
describe('a record the outcome probe made: its replays link to the request that recorded it', () => {
  let db: TestDatabase;
  let up: ControlledUpstream;
  let receiver: Receiver;
  let proxy: RunningProxy;
  const PROBE_PREFIX = '/v1/orders/by-idempotency-key/';
  const yaml = `defaults: { lease: 1s }\nroutes:\n  - name: orders\n    match: { path: "/v1/orders" }\n    onExpiredLease: probe\n    outcomeProbe: { method: GET, path: "${PROBE_PREFIX}{key}" }\n`;
  let holdPosts = true;
  before(async () => {
    db = await createTestDatabase();
    receiver = await startReceiver();
    up = await startControlledUpstream((ex) => {
      if (ex.method === 'POST') {
        if (!holdPosts) ex.respond(201, '{"id":"ord_new"}');
        return;
      }
      ex.respond(200, '{"id":"ord_found"}', { 'x-order-id': 'ord_found' });
    });
    proxy = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: `${yaml}tracing: { endpoint: ${JSON.stringify(receiver.url)} }\n` });
  });
  after(async () => {
    await proxy?.close();
    await up?.close();
    await receiver?.close();
    await db?.drop();
  });

  test('probe found: claim, probe and commit spans; the stored record has the trace; the next retry links to it', async () => {
    const k = `probe-trace-${Date.now()}`;
    const req = (trace: string) => ({ headers: { 'idempotency-key': k, 'content-type': 'application/json', traceparent: `00-${trace}-${'5'.repeat(16)}-01` }, body: '{}' });
    const victim = await spawnFromYaml({ upstream: up.url, databaseUrl: db.url, yaml });
    const first = trySend(`${victim.url}/v1/orders`, req('a'.repeat(32)));
    await up.arrival((e) => e.method === 'POST' && e.key === k);
    await victim.kill();
    assert.ok((await first) instanceof Error, 'the first client never got an answer');
    holdPosts = false;
    const probing = 'b'.repeat(32);
    const settled = await retryWhileInFlight(`${proxy.url}/v1/orders`, req(probing), 5000);
    assert.equal(settled.reply.status, 200);
    assert.equal(settled.reply.headers['idempotent-replayed'], 'true');
    assert.equal(up.exchanges.filter((e) => e.method === 'POST' && e.key === k).length, 1, 'the operation did not run again');

    const [row] = await sql<{ trace_context: string | null }>(db.url, 'SELECT trace_context FROM idempotency_keys WHERE idem_key = $1', [k]);
    const trace = row!.trace_context;
    assert.match(String(trace), new RegExp(`^00-${probing}-[0-9a-f]{16}-01$`), 'the record keeps the trace context of the request that recorded it');

    const again = await send(`${proxy.url}/v1/orders`, req('c'.repeat(32)));
    assert.equal(again.status, 200);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.equal(again.headers['idempotency-proxy-trace'], undefined);
    await waitFor('the replay span', () => receiver.spans.some((s) => s.traceId === 'c'.repeat(32) && s.kind === 2) || undefined, 10_000);
    const recorder = receiver.spans.find((s) => s.traceId === probing && s.kind === 2 && attr(s, 'idempotency.phase') === 'probe');
    assert.ok(recorder, `the probing request's server span (got ${receiver.spans.map((s) => `${s.name}/${String(attr(s, 'idempotency.phase'))}`).join(', ')})`);
    const children = receiver.spans.filter((s) => s.traceId === probing && s.parentSpanId === recorder.spanId).map((s) => s.name);
    for (const name of ['claim', 'probe', 'commit']) assert.ok(children.includes(name), `a ${name} span under it (got ${children.join(', ')})`);
    assert.equal(trace, `00-${probing}-${recorder.spanId}-01`);
    const replay = receiver.spans.find((s) => s.traceId === 'c'.repeat(32) && s.kind === 2)!;
    assert.deepEqual(replay.links?.map((l) => [l.traceId, l.spanId]), [[probing, recorder.spanId]]);
  });
});
