import { describe, test, after } from 'node:test';
import assert from 'node:assert/strict';
import type { TracingConfig } from '../../src/config/types.js';
import type { RequestContext } from '../../src/lifecycle/context.js';
import { samplerFrom } from '../../src/tracing/sampler.js';
import { DEFAULT_MAX_EXPORT_BATCH, startTracing, type StartedTracing } from '../../src/tracing/start.js';
import { TRACE_RECORD_HEADER } from '../../src/proxy/headers.js';
import type { StoredResponse } from '../../src/store/records.js';
import { attr, startReceiver, type Receiver } from '../helpers/otlp.js';

// The recorder and its sampler through startTracing (src/tracing/start.ts),
// exporting through OpenTelemetry's export delegate (over our undici
// transport, src/tracing/otlp-http.ts) to a receiver this test
// runs: batches of OTEL_BSP_MAX_EXPORT_BATCH_SIZE, the rest at shutdown, a
// full queue that drops spans (and says so) without stopping anything, the
// samplers' decisions, and bad OTEL_* values refused by name. The request
// context is the few fields the server span reads.

const config = (endpoint: string, more: Partial<TracingConfig> = {}): TracingConfig =>
  ({ enabled: true, endpoint, serviceName: 'recorder-test', sampleRatio: null, protocol: 'http/protobuf', ...more }) as TracingConfig;

function request(headers: Record<string, string> = {}): RequestContext {
  return {
    req: { headers }, method: 'POST', path: '/orders', route: { name: 'default' }, outcome: 'executed', phase: 'commit',
    key: null, status: 201, source: null, detail: null, span: null, hashedKey: () => 'abc',
  } as unknown as RequestContext;
}

/** n requests through the server span's start and end. */
function serve(t: StartedTracing, n: number, headers: Record<string, string> = {}): RequestContext[] {
  const out: RequestContext[] = [];
  for (let i = 0; i < n; i++) {
    const ctx = request(headers);
    t.tracing.start(ctx);
    t.tracing.end(ctx);
    out.push(ctx);
  }
  return out;
}

const until = async (what: string, ok: () => boolean, ms = 5000): Promise<void> => {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};

describe('the span recorder', () => {
  const receivers: Receiver[] = [];
  after(async () => {
    for (const r of receivers) await r.close();
  });

  test('full batches go at once, the rest at shutdown', async () => {
    const receiver = await startReceiver();
    receivers.push(receiver);
    const losses: string[] = [];
    const t = startTracing(config(receiver.url), { onLoss: (n, _cause, why) => losses.push(`${n} ${why}`) },
      { OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '4', OTEL_BSP_SCHEDULE_DELAY: '60000' });
    serve(t, 10);
    await until('two full batches', () => receiver.spans.length >= 8);
    assert.equal(receiver.contentTypes.length, 2, 'two requests of four spans');
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(receiver.spans.length, 8, 'the last two wait for their batch');
    await t.shutdown();
    assert.equal(receiver.spans.length, 10, 'the shutdown sends the rest');
    assert.deepEqual(losses, []);
  });

  test('by default a request carries up to 4 096 spans, and a batch that outgrows its first buffer arrives whole', async () => {
    const receiver = await startReceiver();
    receivers.push(receiver);
    const t = startTracing(config(receiver.url), { onLoss: () => {} }, { OTEL_BSP_SCHEDULE_DELAY: '60000' });
    serve(t, DEFAULT_MAX_EXPORT_BATCH + 10);
    await until('the first request', () => receiver.spans.length > 0);
    assert.equal(DEFAULT_MAX_EXPORT_BATCH, 4096);
    assert.equal(receiver.contentTypes.length, 1, 'one request for the first 4 096 spans');
    assert.equal(receiver.spans.length, DEFAULT_MAX_EXPORT_BATCH);
    // About 290 bytes a span here: the request grew past the encoder's first 128 KiB buffer, and arrived whole.
    assert.ok(receiver.sizes[0]! > 1 << 17, `the request outgrew 128 KiB: ${receiver.sizes[0]} bytes`);
    assert.equal(new Set(receiver.spans.map((s) => s.spanId)).size, DEFAULT_MAX_EXPORT_BATCH, 'every span decoded, none twice');
    await t.shutdown();
    assert.equal(receiver.spans.length, DEFAULT_MAX_EXPORT_BATCH + 10, 'the shutdown sends the rest');
  });

  test('a full queue drops spans, says how many, and never holds a request', async () => {
    const receiver = await startReceiver({ delayMs: 500 });
    receivers.push(receiver);
    const losses: Array<[number, string, string]> = [];
    const t = startTracing(config(receiver.url), { onLoss: (n, cause, why) => losses.push([n, cause, why]) },
      { OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '4', OTEL_BSP_MAX_QUEUE_SIZE: '8' });
    const started = performance.now();
    serve(t, 20);
    assert.ok(performance.now() - started < 200, 'recording does not wait for the collector');
    assert.equal(losses.length, 12, `12 spans over the queue of 8: ${JSON.stringify(losses)}`);
    assert.ok(losses.every(([n, cause, why]) => n === 1 && cause === 'queue_full' && why === 'the span queue is full'));
    await t.shutdown();
    assert.equal(receiver.spans.length, 8);
  });

  test('an unsampled request records nothing, and its trace context says so', async () => {
    const receiver = await startReceiver();
    receivers.push(receiver);
    const t = startTracing(config(receiver.url, { sampleRatio: 0 }), { onLoss: () => {} });
    const [unsampled] = serve(t, 1);
    assert.match(unsampled!.span!.traceparent(), /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
    // Parent-based: a client's sampled parent is followed even at ratio 0, an unsampled one too.
    const parent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const [followed] = serve(t, 1, { traceparent: parent, tracestate: 'v=1' });
    assert.match(followed!.span!.traceparent(), /^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
    serve(t, 1, { traceparent: parent.replace(/01$/, '00') });
    // An invalid traceparent is no parent: a new trace (at ratio 0, unsampled).
    const [invalid] = serve(t, 1, { traceparent: '00-00000000000000000000000000000000-b7ad6b7169203331-01' });
    assert.doesNotMatch(invalid!.span!.traceparent(), /^00-0{32}/);
    await t.shutdown();
    assert.deepEqual(receiver.spans.map((s) => [s.traceId, s.parentSpanId]), [['0af7651916cd43dd8448eb211c80319c', 'b7ad6b7169203331']]);
  });

  test("a replay links to the trace context its record kept: the proxy's own format read directly, any other valid one through the W3C propagator, an invalid one not at all", async () => {
    const receiver = await startReceiver();
    receivers.push(receiver);
    const t = startTracing(config(receiver.url), { onLoss: () => {} });
    const entry = (tp: string): StoredResponse => ({ status: 200, headers: [['content-type', 'application/json'], [TRACE_RECORD_HEADER, tp]], body: Buffer.alloc(0), bodyRetained: true, bodySize: 0 });
    const ids = '0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331';
    const replays: Array<[string, string | null]> = [
      [`00-${ids}-01`, ids], // ours, sampled
      [`00-${ids}-00`, ids], // ours, not sampled
      [`00-${ids}-03`, ids], // not ours (flags 03), valid W3C: the propagator's
      [`cc-${ids}-01`, ids], // a later version, valid W3C: the propagator's
      [`00-${ids.toUpperCase()}-01`, null], // upper case: invalid
      [`00-${'0'.repeat(32)}-b7ad6b7169203331-01`, null], // an all-zero trace id: invalid
      ['garbage', null],
    ];
    for (const [tp] of replays) {
      const ctx = request();
      t.tracing.start(ctx);
      t.tracing.linkReplay(ctx, entry(tp));
      t.tracing.end(ctx);
    }
    await t.shutdown();
    assert.equal(receiver.spans.length, replays.length);
    const got = receiver.spans.map((s) => (s.links ?? []).map((l) => `${l.traceId}-${l.spanId}`));
    assert.deepEqual(got, replays.map(([, link]) => (link === null ? [] : [link])));
  });

  test("each server span says its own method, route, outcome and phase: the attributes made once per combination are never another request's, past the cache's bound of 1 024 routes too", async () => {
    const receiver = await startReceiver();
    receivers.push(receiver);
    const t = startTracing(config(receiver.url), { onLoss: () => {} });
    const outcomes = ['executed', 'replayed', 'in_flight'];
    const phases = ['commit', 'respond', 'claim'];
    const wanted: string[] = [];
    const serveOne = (method: string, route: string, outcome: string, phase: string): void => {
      const ctx = request();
      Object.assign(ctx, { method, route: { name: route }, outcome, phase });
      wanted.push(`${method} ${route} ${method} ${route} ${outcome} ${phase} ${outcome === 'replayed'}`);
      t.tracing.start(ctx);
      t.tracing.end(ctx);
    };
    // A few routes, eight requests each in a row, outcome and phase changing between neighbours (the same
    // outcome twice with two phases): neither the last request's attributes nor a cached set fits by accident.
    const mixed = (prefix: string, n: number): void => {
      for (let i = 0; i < n; i++) serveOne(i % 16 < 8 ? 'POST' : 'PUT', `${prefix}${(i >> 3) % 3}`, outcomes[(i >> 1) % 3]!, phases[i % 3]!);
    };
    mixed('a', 300);
    for (let i = 0; i < 1_100; i++) serveOne('POST', `b${i}`, 'executed', 'commit'); // past the bound of 1 024 routes
    mixed('c', 300); // routes past the bound: compiled for each span
    mixed('a', 60); // the first routes again, from the cache
    await t.shutdown();
    const got = receiver.spans.map((s) => [s.name, attr(s, 'http.request.method'), attr(s, 'idempotency.route'), attr(s, 'idempotency.outcome'),
      attr(s, 'idempotency.phase'), attr(s, 'idempotency.replayed')].join(' '));
    assert.deepEqual(got, wanted);
  });

  test('the ratio sampler decides as the OpenTelemetry JS SDK does: the trace id words XORed, under ratio × 0xffffffff', () => {
    const s = samplerFrom(0.25, {});
    let sampled = 0;
    const bound = Math.floor(0.25 * 0xffffffff);
    for (let i = 0; i < 4000; i++) {
      const w = [0, 1, 2, 3].map(() => (Math.random() * 2 ** 32) | 0) as [number, number, number, number];
      const expected = ((w[0] ^ w[1] ^ w[2] ^ w[3]) >>> 0) < bound;
      assert.equal(s.root(...w), expected);
      if (expected) sampled += 1;
    }
    assert.ok(sampled > 800 && sampled < 1200, `about a quarter sampled: ${sampled} of 4000`);
    assert.equal(samplerFrom(null, { OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '1' }).root(-1, -1, -1, -1), true);
    assert.equal(samplerFrom(null, { OTEL_TRACES_SAMPLER: 'always_off' }).root(0, 0, 0, 1), false);
    assert.equal(samplerFrom(null, {}).description, 'parentbased_always_on');
    assert.equal(samplerFrom(null, { OTEL_TRACES_SAMPLER: 'traceidratio' }).parentBased, false);
  });

  test('bad OTEL_* values are refused with the variable named', () => {
    assert.throws(() => samplerFrom(null, { OTEL_TRACES_SAMPLER: 'sometimes' }), /OTEL_TRACES_SAMPLER=sometimes: not a sampler/);
    assert.throws(() => samplerFrom(null, { OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '1.5' }), /OTEL_TRACES_SAMPLER_ARG=1.5/);
    assert.throws(() => startTracing(config('http://127.0.0.1:9'), { onLoss: () => {} }, { OTEL_BSP_MAX_QUEUE_SIZE: 'lots' }), /OTEL_BSP_MAX_QUEUE_SIZE=lots: a whole number above 0/);
    assert.throws(() => startTracing(config('http://127.0.0.1:9'), { onLoss: () => {} }, { OTEL_BSP_SCHEDULE_DELAY: '-5' }), /OTEL_BSP_SCHEDULE_DELAY=-5/);
    // Past a timer's limit (about 24.8 days) Node fires the export timer after 1 ms: a batch sent for every few spans.
    assert.throws(() => startTracing(config('http://127.0.0.1:9'), { onLoss: () => {} }, { OTEL_BSP_SCHEDULE_DELAY: '3000000000' }), /OTEL_BSP_SCHEDULE_DELAY=3000000000: at most 2073600000/);
    // The export timeout: OpenTelemetry's configuration would ignore a bad one in silence, and time every export out at once past a timer's limit.
    assert.throws(() => startTracing(config('http://127.0.0.1:9'), { onLoss: () => {} }, { OTEL_EXPORTER_OTLP_TIMEOUT: 'soon' }), /OTEL_EXPORTER_OTLP_TIMEOUT=soon: a whole number above 0/);
    assert.throws(() => startTracing(config('http://127.0.0.1:9'), { onLoss: () => {} }, { OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '3000000000' }), /OTEL_EXPORTER_OTLP_TRACES_TIMEOUT=3000000000: at most 2073600000/);
  });
});
