import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { JsonTraceSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { Clock, type Envelope, type SpanEncoder } from '../../src/tracing/encoder.js';
import { JsonSpans } from '../../src/tracing/otlp-json.js';
import { ProtobufSpans } from '../../src/tracing/otlp-protobuf.js';
import { CLIENT, INTERNAL, linkOf, SERVER, TraceSpan, word, type AttributeValue, type SpanRef } from '../../src/tracing/span.js';
import { fields } from '../helpers/otlp.js';

// The recorder's OTLP encoders (src/tracing/otlp-protobuf.ts, otlp-json.ts)
// against OpenTelemetry's own: the same spans, written by ours and by the
// serializers of @opentelemetry/otlp-transformer (what the SDK's OTLP
// exporters send), decoded field by field, must be the same request — ids,
// parent, trace state, times to the nanosecond, kinds, flags, attributes of
// every type, links, status, resource and scope. Spans of every size class
// the protobuf encoder treats differently: under 128 bytes, 128 B–16 KiB,
// over 16 KiB, attributes over 127 bytes, non-ASCII text.

const clock = new Clock(1_764_000_000_123.456);
const envelope: Envelope = {
  resource: { 'service.name': 'idempotency-proxy-test', 'deployment.environment': 'tést', 'host.cpus': 2, 'x.flag': true },
  scopeName: 'idempotency-proxy',
  scopeVersion: '0.1.0',
};

interface Case {
  span: TraceSpan;
  endMs: number;
  attrs: Array<[string, AttributeValue]>;
  /** Attributes of small sets, written compiled with the span's name and kind (SpanEncoder.compileHead) before the others. */
  fixed?: Array<[string, string | boolean]>;
  /** Attributes written whole, as compileAttr() encoded them (SpanEncoder.attrCompiled), after the others. */
  compiled?: Array<[string, AttributeValue]>;
  /** An attribute compiled into the head after `fixed` (compileHead's `also`: a route's path). */
  also?: [string, AttributeValue];
  /** The head's text attribute: its name, the length compiled, the value open() is given, and what it must read as. */
  text?: { key: string; length: number; value: string | null; reads: string };
  link?: SpanRef;
  error?: string;
  /** Written with openChild() as this span's child, with no TraceSpan of its own (a store round trip's span): `span` is what it must read as. */
  parent?: TraceSpan;
}

const hexId = (words: number[]): string => words.map((w) => (w >>> 0).toString(16).padStart(8, '0')).join('');

function cases(): Case[] {
  const client: SpanRef = { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', sampled: true, traceState: 'vendor=abc,other=x' };
  const t = [0, 1, 2, 3].map((i) => word(client.traceId, i)) as [number, number, number, number];
  const server = new TraceSpan({ record: () => {} }, ...t, 0x12345678, -0x789abcdf, word(client.spanId, 0), word(client.spanId, 1), true, client.traceState, 'POST default', SERVER, 1234.567891);
  const child = new TraceSpan({ record: () => {} }, ...t, -1, 7, server.s0, server.s1, false, client.traceState, 'claim', CLIENT, 1235.000001);
  child.setAttribute('idempotency.claim', 'claimed');
  const root = new TraceSpan({ record: () => {} }, -0x7fffffff, 0, 42, -5, 1, 2, 0, 0, false, null, 'x', SERVER, 0.001);
  const big = new TraceSpan({ record: () => {} }, 9, 8, 7, 6, 5, 4, 0, 0, false, null, 'GET /ünïcode', SERVER, 99_999_999.5);
  const commit = new TraceSpan({ record: () => {} }, ...t, 11, 12, server.s0, server.s1, false, null, 'commit', CLIENT, 1249.5);
  const release = new TraceSpan({ record: () => {} }, ...t, 13, 14, server.s0, server.s1, false, null, 'release', CLIENT, 1250.5);
  const replayed = new TraceSpan({ record: () => {} }, 1, 2, 3, 4, 5, 6, 0, 0, false, null, 'POST orders', SERVER, 1999.25);
  const link: SpanRef = { traceId: '0123456789abcdeffedcba9876543210', spanId: '00000000000000a1', sampled: true, traceState: null };
  const storeClaim = new TraceSpan({ record: () => {} }, ...t, 0x0badf00d, -0x21524111, server.s0, server.s1, false, client.traceState, 'claim', CLIENT, 1236.75);
  // Spans with two attributes or more, which open() writes with two bytes kept for their length: the upstream
  // call's (over 127 bytes), and a short one, whose length's second byte is given back.
  const upstream = new TraceSpan({ record: () => {} }, ...t, 31, 32, server.s0, server.s1, false, null, 'upstream', CLIENT, 1240.5);
  upstream.setAttribute('http.request.method', 'POST');
  upstream.setAttribute('http.response.status_code', 201);
  const short = new TraceSpan({ record: () => {} }, 1, 2, 3, 4, 33, 34, 0, 0, false, null, 'w', INTERNAL, 5);
  short.setAttribute('a', 1);
  short.setAttribute('b', true);
  const storeCommit = new TraceSpan({ record: () => {} }, root.t0, root.t1, root.t2, root.t3, 21, -22, root.s0, root.s1, false, null, 'commit', CLIENT, 0.003);
  return [
    {
      span: server, endMs: 1260.000999,
      attrs: [['http.request.method', 'POST'], ['url.path', `/orders/${'p'.repeat(200)}`], ['idempotency.replayed', true], ['http.response.status_code', 201],
        ['idempotency.ratio', 0.25], ['idempotency.polls', 0], ['idempotency.flag', false], ['idempotency.note', 'ça coûte €']],
      fixed: [['idempotency.route', 'orders'], ['idempotency.outcome', 'replayed'], ['idempotency.phase', 'respond'], ['idempotency.first', false]],
      link, error: 'upstream: connection reset',
    },
    { span: child, endMs: 1236.5, attrs: [] },
    // A span with a head under 128 bytes: its length's second byte given back.
    { span: root, endMs: 0.002, attrs: [], fixed: [['idempotency.first', false]] },
    { span: big, endMs: 100_000_000, attrs: [['url.path', `/${'é'.repeat(9_000)}`], ['error.source', 'upstream']], fixed: [['idempotency.route', 'rüte']], error: 'x'.repeat(300),
      compiled: [['url.full', `/ü${'x'.repeat(150)}`], ['idempotency.count', 7]],
      link: { ...link, traceState: 'kept=1', sampled: false } },
    // A replay's server span with its head and a link not sampled.
    { span: replayed, endMs: 2000.5, attrs: [['idempotency.note', 'x']], fixed: [['idempotency.outcome', 'replayed']], compiled: [['url.path', '/orders']], link: { ...link, sampled: false } },
    // Server spans whose head holds the route's path and the hashed key's attribute, its characters given to
    // open(): twelve hex digits, as every hashed key is; then a value the wrong length and beyond ASCII, which
    // must still make a valid request (its characters replaced, cut or padded to the head's length).
    { span: replayed, endMs: 2000.75, attrs: [['idempotency.note', 'y']], fixed: [['idempotency.outcome', 'replayed']], also: ['url.path', '/orders'],
      text: { key: 'idempotency.key_hash', length: 12, value: '0123456789ab', reads: '0123456789ab' }, link: { ...link, sampled: true } },
    { span: root, endMs: 0.0025, attrs: [], fixed: [], also: ['url.path', '/ü'], text: { key: 'idempotency.key_hash', length: 12, value: 'é€9', reads: '??9?????????' } },
    { span: root, endMs: 0.0026, attrs: [], text: { key: 'idempotency.key_hash', length: 4, value: 'abcdefgh', reads: 'abcd' } },
    { span: root, endMs: 0.0027, attrs: [], text: { key: 'idempotency.key_hash', length: 3, value: null, reads: '???' } },
    { span: upstream, endMs: 1248.5, attrs: [] },
    { span: short, endMs: 6, attrs: [] },
    // Spans without a head, which open() writes with one byte kept for their length: over 127 bytes, over 16 KiB.
    { span: commit, endMs: 1250.25, attrs: [['http.response.status_code', 503]], error: 'the store refused: '.repeat(8) },
    { span: release, endMs: 1251, attrs: [], error: 'ü'.repeat(9_000) },
    // Store round trips' spans written with openChild(): a claim's with its outcome, under the client's trace
    // state; a failed commit's without one, under a root span.
    { span: storeClaim, parent: server, endMs: 1237.25, attrs: [], fixed: [['idempotency.claim', 'complete']] },
    { span: storeCommit, parent: root, endMs: 0.0035, attrs: [], fixed: [], error: 'the store refused' },
  ];
}

function write(enc: SpanEncoder, list: Case[]): Uint8Array {
  for (const c of list) {
    if (c.parent !== undefined) enc.openChild(c.parent, c.span.s0, c.span.s1, c.span.start, c.endMs, enc.compileHead(c.span.name, c.span.kind, c.fixed ?? []));
    else if (c.also !== undefined || c.text !== undefined) {
      const also = c.also === undefined ? null : enc.compileAttr(enc.key(c.also[0]), c.also[1]);
      const text = c.text === undefined ? null : { key: enc.key(c.text.key), length: c.text.length };
      enc.open(c.span, c.endMs, enc.compileHead(c.span.name, c.span.kind, c.fixed ?? [], also, text), c.text?.value ?? null);
    } else enc.open(c.span, c.endMs, c.fixed === undefined ? null : enc.compileHead(c.span.name, c.span.kind, c.fixed));
    for (const [k, v] of c.attrs) enc.attr(k, v);
    for (const [k, v] of c.compiled ?? []) enc.attrCompiled(enc.compileAttr(enc.key(k), v));
    if (c.link !== undefined) enc.link(linkOf(c.link), 'idempotency.link', 'replay_of');
    if (c.error !== undefined) enc.error(c.error);
    enc.close();
  }
  assert.equal(enc.count, list.length);
  return enc.take();
}

const hrTime = (ms: number): [number, number] => {
  const ns = BigInt(clock.decimal(ms));
  return [Number(ns / 1_000_000_000n), Number(ns % 1_000_000_000n)];
};

/** The same spans as the SDK's ReadableSpan (the shape its OTLP serializers read). */
function readable(list: Case[]): unknown[] {
  // One resource and one scope object for all: the serializer groups spans by them.
  const resource = { attributes: envelope.resource, schemaUrl: undefined, merge: () => resource };
  const instrumentationScope = { name: envelope.scopeName, version: envelope.scopeVersion };
  return list.map((c) => {
    const s = c.span;
    const attributes: Record<string, AttributeValue> = {};
    const own = s.attrs ?? [];
    for (let i = 0; i < own.length; i += 2) attributes[own[i] as string] = own[i + 1]!;
    for (const [k, v] of c.fixed ?? []) attributes[k] = v;
    if (c.also !== undefined) attributes[c.also[0]] = c.also[1];
    if (c.text !== undefined) attributes[c.text.key] = c.text.reads;
    for (const [k, v] of c.attrs) attributes[k] = v;
    for (const [k, v] of c.compiled ?? []) attributes[k] = v;
    const state = (v: string | null) => (v === null ? undefined : { serialize: () => v });
    return {
      name: s.name,
      kind: s.kind - 1, // the API's SpanKind: INTERNAL 0, SERVER 1, CLIENT 2
      spanContext: () => ({ traceId: hexId([s.t0, s.t1, s.t2, s.t3]), spanId: hexId([s.s0, s.s1]), traceFlags: 1, traceState: state(s.traceState) }),
      parentSpanContext: (s.p0 | s.p1) === 0 ? undefined : { traceId: hexId([s.t0, s.t1, s.t2, s.t3]), spanId: hexId([s.p0, s.p1]), traceFlags: 1, isRemote: s.remoteParent },
      startTime: hrTime(s.start),
      endTime: hrTime(c.endMs),
      status: c.error === undefined ? { code: 0 } : { code: 2, message: c.error },
      attributes,
      links: c.link === undefined ? [] : [{
        context: { traceId: c.link.traceId, spanId: c.link.spanId, traceFlags: c.link.sampled ? 1 : 0, isRemote: true, traceState: state(c.link.traceState) },
        attributes: { 'idempotency.link': 'replay_of' },
      }],
      events: [],
      duration: [0, 0],
      ended: true,
      resource,
      instrumentationScope,
      droppedAttributesCount: 0,
      droppedEventsCount: 0,
      droppedLinksCount: 0,
    };
  });
}

// --- a protobuf decoder driven by the .proto's structure: every field kept, proto3 defaults dropped

type Schema = { [no: number]: Schema | 'scalar' | 'string' | 'bytes' };
const ANY: Schema = { 1: 'string', 2: 'scalar', 3: 'scalar', 4: 'bytes' };
const KV: Schema = { 1: 'string', 2: ANY };
const STATUS: Schema = { 2: 'string', 3: 'scalar' };
const LINK: Schema = { 1: 'bytes', 2: 'bytes', 3: 'string', 4: KV, 5: 'scalar', 6: 'scalar' };
const EVENT: Schema = { 1: 'scalar', 2: 'string', 3: KV, 4: 'scalar' };
const SPAN: Schema = { 1: 'bytes', 2: 'bytes', 3: 'string', 4: 'bytes', 5: 'string', 6: 'scalar', 7: 'scalar', 8: 'scalar', 9: KV, 10: 'scalar', 11: EVENT, 12: 'scalar', 13: LINK, 14: 'scalar', 15: STATUS, 16: 'scalar' };
const SCOPE: Schema = { 1: 'string', 2: 'string', 3: KV, 4: 'scalar' };
const REQUEST: Schema = { 1: { 1: { 1: KV, 2: 'scalar' }, 2: { 1: SCOPE, 2: SPAN, 3: 'string' }, 3: 'string' } };

type Tree = { [no: string]: Array<string | Tree> };

function decode(buf: Buffer, schema: Schema): Tree {
  const out: Tree = {};
  for (const f of fields(buf)) {
    const kind = schema[f.no];
    assert.ok(kind !== undefined, `field ${f.no} is not in the .proto`);
    let v: string | Tree;
    if (kind === 'scalar') {
      if (f.int === 0n) continue;
      v = f.int.toString();
    } else if (kind === 'string') {
      if (f.bytes.length === 0) continue;
      v = f.bytes.toString('utf8');
    } else if (kind === 'bytes') {
      if (f.bytes.length === 0) continue;
      v = f.bytes.toString('hex');
    } else {
      v = decode(f.bytes, kind);
      if (Object.keys(v).length === 0) continue;
    }
    (out[f.no] ??= []).push(v);
  }
  return out;
}

describe('OTLP encoding: the recorder against OpenTelemetry’s serializers', () => {
  test('protobuf: the same ExportTraceServiceRequest, field by field', () => {
    const ours = Buffer.from(write(new ProtobufSpans(envelope, clock, 256), cases()));
    const theirs = Buffer.from(ProtobufTraceSerializer.serializeRequest(readable(cases()) as never)!);
    const a = decode(ours, REQUEST);
    const b = decode(theirs, REQUEST);
    assert.deepEqual(a, b);
    // What the comparison covers: fifteen spans (two written as a parent's child, four with a head's text
    // attribute, two with two bytes kept for their length but no head), two over 16 KiB, four links, five error statuses.
    const spans = ((a[1]![0] as Tree)[2]![0] as Tree)[2]!;
    assert.equal(spans.length, 15);
    assert.ok(ours.length > 16_384 + 1000, `the request holds the 16 KiB span (${ours.length} bytes)`);
  });

  test('protobuf: a later batch from the same encoder, in the memory of a sent one, starts afresh', () => {
    const enc = new ProtobufSpans(envelope, clock, 64);
    const first = write(enc, cases());
    write(enc, cases().slice(0, 1));
    enc.recycle(first); // sent: the next batch after the one being written goes into its memory
    const second = Buffer.from(write(enc, cases().slice(1, 2)));
    const third = write(enc, cases().slice(1, 2));
    assert.equal(third.buffer, first.buffer, 'written into the recycled memory');
    assert.deepEqual(decode(Buffer.from(third), REQUEST), decode(second, REQUEST));
    const theirs = Buffer.from(ProtobufTraceSerializer.serializeRequest(readable(cases().slice(1, 2)) as never)!);
    assert.deepEqual(decode(second, REQUEST), decode(theirs, REQUEST));
  });

  test('protobuf: a batch\'s memory is its own, never a slice of Node\'s shared buffer pool, so reusing it clobbers nothing', () => {
    // A small batch (no growth) in a buffer under Node's pool threshold: had it come from the shared pool,
    // recycle() would hand the whole 8 KiB pool slab, other Buffers' bytes included, to the next batch.
    const enc = new ProtobufSpans(envelope, clock, 512);
    const body = write(enc, cases().slice(2, 3));
    assert.equal(body.buffer.byteLength, 512, 'the request lies in the encoder\'s own 512-byte buffer');
    const neighbour = Buffer.from('a pooled neighbour'); // from the shared pool, wherever it is
    enc.recycle(body);
    write(enc, cases().slice(2, 3));
    const reused = write(enc, cases().slice(2, 3));
    assert.equal(reused.buffer, body.buffer);
    assert.equal(neighbour.toString(), 'a pooled neighbour');
  });

  test('JSON: the same request in the OTLP JSON mapping', () => {
    const ours = JSON.parse(Buffer.from(write(new JsonSpans(envelope, clock), cases())).toString()) as unknown;
    const theirs = JSON.parse(Buffer.from(JsonTraceSerializer.serializeRequest(readable(cases()) as never)!).toString()) as unknown;
    assert.deepEqual(normalise(ours), normalise(theirs));
  });
});

/** The JSON mapping's equivalent spellings made one: 64-bit integers as strings or numbers, defaults present or left out. */
function normalise(v: unknown): unknown {
  if (Array.isArray(v)) {
    const items = v.map(normalise).filter((x) => x !== undefined);
    return items.length === 0 ? undefined : items;
  }
  if (v !== null && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) {
      const n = normalise(x);
      if (n !== undefined) out[k] = n;
    }
    return Object.keys(out).length === 0 ? undefined : out;
  }
  if (v === 0 || v === '' || v === '0' || v === false) return undefined;
  if (typeof v === 'number' && Number.isInteger(v)) return String(v);
  return v;
}
