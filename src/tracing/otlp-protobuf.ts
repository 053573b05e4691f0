import { Clock, type CompiledAttr, type CompiledHead, type CompiledKey, type Envelope, type HeadText, type SpanEncoder } from './encoder.js';
import type { AttributeValue, SpanLink, TraceSpan } from './span.js';

// OTLP/protobuf: the export request (ExportTraceServiceRequest, from
// opentelemetry/proto/collector/trace/v1 and trace/v1/trace.proto) written
// straight into one buffer as spans end. Its envelope — one ResourceSpans
// with the resource, one ScopeSpans with the scope — is encoded once at
// start-up; room for it is kept at the front of the buffer, and take() writes
// it there in front of the spans, so a batch is sent without being copied.
// Field numbers are the .proto's; the tags below are (field << 3 | wire type).

const VARINT = 0;
const I64 = 1;
const LEN = 2;
const I32 = 5;
const tag = (field: number, wire: number): number => (field << 3) | wire;

// Span (trace.proto)
const SPAN_TRACE_ID = tag(1, LEN);
const SPAN_SPAN_ID = tag(2, LEN);
const SPAN_TRACE_STATE = tag(3, LEN);
const SPAN_PARENT = tag(4, LEN);
const SPAN_NAME = tag(5, LEN);
const SPAN_KIND = tag(6, VARINT);
const SPAN_START = tag(7, I64);
const SPAN_END = tag(8, I64);
const SPAN_ATTRIBUTE = tag(9, LEN);
const SPAN_LINK = tag(13, LEN);
const SPAN_STATUS = tag(15, LEN);
const SPAN_FLAGS = tag(16, I32); // two bytes as a varint: 0x85 0x01
// Span.Link
// (trace id 1 and span id 2, as a Span's: writeIds)
const LINK_TRACE_STATE = tag(3, LEN);
const LINK_ATTRIBUTE = tag(4, LEN);
const LINK_FLAGS = tag(6, I32);
// Status: message 2, code 3 (STATUS_CODE_ERROR = 2)
const STATUS_MESSAGE = tag(2, LEN);
const STATUS_CODE = tag(3, VARINT);
const STATUS_ERROR = 2;
// KeyValue and AnyValue (common.proto)
const KV_KEY = tag(1, LEN);
const KV_VALUE = tag(2, LEN);
const ANY_STRING = tag(1, LEN);
const ANY_BOOL = tag(2, VARINT);
const ANY_INT = tag(3, VARINT);
const ANY_DOUBLE = tag(4, I64);
// The envelope: ExportTraceServiceRequest.resource_spans 1; ResourceSpans.resource 1, .scope_spans 2;
// Resource.attributes 1; ScopeSpans.scope 1, .spans 2; InstrumentationScope.name 1, .version 2.
const REQUEST_RESOURCE_SPANS = tag(1, LEN);
const RESOURCE_SPANS_RESOURCE = tag(1, LEN);
const RESOURCE_SPANS_SCOPE_SPANS = tag(2, LEN);
const RESOURCE_ATTRIBUTE = tag(1, LEN);
const SCOPE_SPANS_SCOPE = tag(1, LEN);
const SCOPE_SPANS_SPAN = tag(2, LEN);
const SCOPE_NAME = tag(1, LEN);
const SCOPE_VERSION = tag(2, LEN);

// OTLP span flags: the W3C trace flags (bit 0: sampled), and whether the parent is remote (bits 8, 9).
const FLAGS_HAS_IS_REMOTE = 0x100;
const FLAGS_IS_REMOTE = 0x200;

/**
 * TypedArray#set, called through a constant: \`buf.set\` looked the method up on every call (a LoadIC miss each
 * time in the optimized code, found by counting instructions; docs/tracing-cost.md). Every copy of encoded bytes
 * goes through it, short ones too: about 160 instructions a call, where a loop of byte copies cost about 35 a
 * byte on Node 20 (docs/tracing-cost.md, 2026-12-05, late morning).
 */
const copyInto = Uint8Array.prototype.set;

const QUESTION_MARK = 0x3f;

const varintLength = (n: number): number => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5);

/** A growing buffer with protobuf's primitives (unsigned 32-bit varints, fixed 32/64, length-delimited fields). */
class Wire {
  buf: Buffer;
  /** The same bytes, for ids and times: one bounds check for four or eight bytes. */
  view: DataView;
  pos: number;

  constructor(size: number, start = 0, buf: Buffer = Buffer.allocUnsafe(size)) {
    this.buf = buf;
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.length);
    this.pos = start;
  }

  room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    // Never from Node's shared pool: a batch's memory is reused whole once sent (ProtobufSpans.recycle).
    const grown = Buffer.allocUnsafeSlow(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(grown, 0, 0, this.pos);
    this.buf = grown;
    this.view = new DataView(grown.buffer, grown.byteOffset, grown.length);
  }

  byte(b: number): void {
    this.buf[this.pos++] = b;
  }

  varint(n: number): void {
    while (n > 0x7f) {
      this.buf[this.pos++] = (n & 0x7f) | 0x80;
      n >>>= 7;
    }
    this.buf[this.pos++] = n;
  }

  string(s: string): void {
    // Short ASCII (names, paths, hashed keys: nearly every string here) is copied by code units:
    // a third of the cost of Buffer.byteLength and buf.write (44 against 159 ns for 12 characters).
    const units = s.length;
    if (units < 0x80) {
      this.room(units + 1);
      const b = this.buf;
      const at = this.pos;
      let p = at + 1;
      let i = 0;
      for (; i < units; i++) {
        const c = s.charCodeAt(i);
        if (c >= 0x80) break;
        b[p++] = c;
      }
      if (i === units) {
        b[at] = units;
        this.pos = p;
        return;
      }
    }
    const n = Buffer.byteLength(s, 'utf8');
    this.room(n + 5);
    this.varint(n);
    this.pos += this.buf.write(s, this.pos, n, 'utf8');
  }

  /** Encoded bytes copied in. */
  bytes(src: Buffer): void {
    const n = src.length;
    this.room(n);
    const p = this.pos;
    copyInto.call(this.buf, src, p);
    this.pos = p + n;
  }

  /**
   * `n` characters of `s`, one byte each, with no tag or length (a head's text attribute's value: its tag and
   * lengths are in the head): a character beyond ASCII, or one past the end of `s`, is written as `?`, so the
   * bytes written are always the `n` the head's lengths count.
   */
  ascii(s: string | null, n: number): void {
    this.room(n);
    const b = this.buf;
    const p = this.pos;
    const have = s === null ? 0 : s.length;
    for (let i = 0; i < n; i++) {
      const c = i < have ? s!.charCodeAt(i) : QUESTION_MARK;
      b[p + i] = c < 0x80 ? c : QUESTION_MARK;
    }
    this.pos = p + n;
  }

  fixed32(n: number): void {
    this.view.setUint32(this.pos, n, true);
    this.pos += 4;
  }

  /** A length-delimited field's start: one byte kept for its length (most are short). */
  open(): number {
    return this.pos++;
  }

  /** Writes the length of the field opened at `at`, moving its content when the length needs more than one byte. */
  close(at: number): void {
    const length = this.pos - at - 1;
    if (length < 0x80) {
      this.buf[at] = length;
      return;
    }
    const extra = varintLength(length) - 1;
    this.room(extra);
    this.buf.copyWithin(at + 1 + extra, at + 1, this.pos);
    this.pos += extra;
    const end = this.pos;
    this.pos = at;
    this.varint(length);
    this.pos = end;
  }

  keyValue(fieldTag: number, key: Buffer, value: AttributeValue): void {
    this.room(key.length + 24);
    this.byte(fieldTag);
    const kv = this.open();
    copyInto.call(this.buf, key, this.pos);
    this.pos += key.length;
    this.byte(KV_VALUE);
    const any = this.open();
    if (typeof value === 'string') {
      this.byte(ANY_STRING);
      this.string(value);
    } else if (typeof value === 'boolean') {
      this.byte(ANY_BOOL);
      this.byte(value ? 1 : 0);
    } else if (Number.isInteger(value) && value >= 0 && value <= 0xffffffff) {
      this.byte(ANY_INT);
      this.varint(value);
    } else {
      this.byte(ANY_DOUBLE);
      this.buf.writeDoubleLE(value, this.pos);
      this.pos += 8;
    }
    this.close(any);
    this.close(kv);
  }
}

/** A KeyValue's key field (tag, length, bytes), encoded once per attribute name; whole attributes of a small set of values likewise. */
class Keys {
  private readonly keys = new Map<string, Buffer>();
  private readonly pairs = new Map<string, Map<string | boolean, Buffer>>();
  private readonly linkPairs = new Map<string, Map<string | boolean, Buffer>>();
  private key0 = '';
  private value0: string | boolean = '';
  private pair0: Buffer | null = null;
  private key1 = '';
  private value1: string | boolean = '';
  private pair1: Buffer | null = null;

  /**
   * The attribute field (tag, length, key, value) of key = value: a span's, or with LINK_ATTRIBUTE a link's.
   * At most 64 values a key are kept.
   */
  pair(key: string, value: string | boolean, fieldTag: number = SPAN_ATTRIBUTE): Buffer {
    // The two last span attributes asked for first: a replay's claim span has one, a new key's spans two.
    if (fieldTag === SPAN_ATTRIBUTE) {
      if (key === this.key0 && value === this.value0 && this.pair0 !== null) return this.pair0;
      if (key === this.key1 && value === this.value1 && this.pair1 !== null) return this.pair1;
    }
    const encoded = this.lookUp(key, value, fieldTag);
    if (fieldTag === SPAN_ATTRIBUTE) {
      this.key1 = this.key0;
      this.value1 = this.value0;
      this.pair1 = this.pair0;
      this.key0 = key;
      this.value0 = value;
      this.pair0 = encoded;
    }
    return encoded;
  }

  private lookUp(key: string, value: string | boolean, fieldTag: number): Buffer {
    const pairs = fieldTag === SPAN_ATTRIBUTE ? this.pairs : this.linkPairs;
    let values = pairs.get(key);
    if (values === undefined) pairs.set(key, (values = new Map()));
    let encoded = values.get(value);
    if (encoded === undefined) {
      const w = new Wire(64 + (typeof value === 'string' ? value.length * 3 : 0));
      w.keyValue(fieldTag, this.get(key), value);
      encoded = Buffer.from(w.buf.subarray(0, w.pos));
      if (values.size < 64) values.set(value, encoded);
    }
    return encoded;
  }

  get(key: string): Buffer {
    let k = this.keys.get(key);
    if (k === undefined) {
      const w = new Wire(key.length * 3 + 8);
      w.byte(KV_KEY);
      w.string(key);
      k = Buffer.from(w.buf.subarray(0, w.pos));
      if (this.keys.size < 256) this.keys.set(key, k);
    }
    return k;
  }
}

function encodeEnvelope(env: Envelope, keys: Keys): { resource: Buffer; scope: Buffer } {
  const r = new Wire(1024);
  r.byte(RESOURCE_SPANS_RESOURCE);
  const res = r.open();
  for (const [k, v] of Object.entries(env.resource)) r.keyValue(RESOURCE_ATTRIBUTE, keys.get(k), v);
  r.close(res);
  const s = new Wire(256);
  s.byte(SCOPE_SPANS_SCOPE);
  const scope = s.open();
  s.byte(SCOPE_NAME);
  s.string(env.scopeName);
  s.byte(SCOPE_VERSION);
  s.string(env.scopeVersion);
  s.close(scope);
  return { resource: Buffer.from(r.buf.subarray(0, r.pos)), scope: Buffer.from(s.buf.subarray(0, s.pos)) };
}

/**
 * What compileHead() returns here: the bytes open() copies in after a span's fixed fields, and the length of the
 * text open() writes right after them (the value of the head's last attribute, whose tag and lengths end the
 * bytes), -1 for none.
 */
class Head implements CompiledHead {
  readonly compiled = true as const;
  /**
   * Bytes openChild() keeps for the length of a child span with this head: a child's fields but its head are 62
   * bytes (ids, parent, times, flags) and its span under 128 bytes takes one (a store round trip's), two above
   * (the upstream call's, about 140 bytes).
   */
  readonly childReserve: number;
  constructor(readonly bytes: Buffer, readonly textLength: number) {
    this.childReserve = 62 + bytes.length + Math.max(textLength, 0) < 128 ? 1 : 2;
  }
}

export class ProtobufSpans implements SpanEncoder {
  readonly contentType = 'application/x-protobuf';
  count = 0;
  private readonly keys = new Keys();
  private readonly resource: Buffer;
  private readonly scope: Buffer;
  /** Room at the front for the envelope: both its fields, their tags and lengths (5 bytes each at most). */
  private readonly head: number;
  private wire: Wire;
  private spanAt = 0;
  /** Bytes kept for the length of the span being written (open(), close()). */
  private reserved = 2;
  private readonly names = new Map<string, Buffer>();
  private lastName = '';
  private lastNamed: Buffer | undefined = undefined;
  private tailKey = '';
  private tailValue = '';
  private tails: Buffer[] = [];
  /** Buffers of sent requests, written into again: no new external memory per batch (its growth drives full collections). */
  private readonly spares: Buffer[] = [];

  constructor(envelope: Envelope, private readonly clock = new Clock(), private readonly size = 1 << 17) {
    ({ resource: this.resource, scope: this.scope } = encodeEnvelope(envelope, this.keys));
    this.head = this.resource.length + this.scope.length + 12;
    this.wire = new Wire(size, this.head, Buffer.allocUnsafeSlow(size));
  }

  open(span: TraceSpan, endMs: number, head: CompiledHead | null = null, text: string | null = null): void {
    // Bytes kept for the span's length: two for a span with a head (a server span: 128 bytes to 16 KiB) or with
    // two attributes or more (the upstream call's, about 140 bytes), one for the others (under 128 bytes). close()
    // moves a span whose length needs more or fewer (TypedArray#copyWithin, a call into C++).
    const h = head as Head | null;
    const attrs = span.attrs;
    this.begin(span, span.s0, span.s1, span.p0, span.p1, span.remoteParent, span.start, endMs, h === null ? this.name(span) : h.bytes, h !== null || (attrs !== null && attrs.length >= 4) ? 2 : 1);
    if (h !== null && h.textLength >= 0) this.wire.ascii(text, h.textLength);
    if (attrs === null) return;
    // A child span's attributes: claim outcomes, probe results, methods (small sets: reused encodings) and numbers.
    for (let i = 0; i < attrs.length; i += 2) {
      const v = attrs[i + 1]!;
      if (typeof v === 'number') this.attr(attrs[i] as string, v);
      else this.attrOf(attrs[i] as string, v);
    }
  }

  openChild(parent: TraceSpan, s0: number, s1: number, startMs: number, endMs: number, head: CompiledHead): void {
    const h = head as Head;
    this.begin(parent, s0, s1, parent.s0, parent.s1, false, startMs, endMs, h.bytes, h.childReserve);
    if (h.textLength >= 0) this.wire.ascii(null, h.textLength);
  }

  /**
   * A span's fields up to its name, kind and head's attributes (`named`): the trace id and trace state of
   * `trace`, the span id `s0`, `s1`, the parent's `p0`, `p1` (0, 0: none), times, flags. `reserved`: bytes kept
   * for the span's length.
   */
  private begin(trace: TraceSpan, s0: number, s1: number, p0: number, p1: number, remote: boolean, startMs: number, endMs: number, named: Buffer, reserved: number): void {
    const w = this.wire;
    const state = trace.traceState;
    w.room(96 + named.length + (state === null ? 0 : state.length * 3 + 6));
    // The fixed fields through locals, the position written back once (a w.byte() a field loaded and stored the
    // wire's buffer and position every time); ids as big-endian words. A string may grow the buffer: the locals
    // are read again after one.
    let buf = w.buf;
    let view = w.view;
    let p = w.pos;
    buf[p] = SCOPE_SPANS_SPAN;
    this.spanAt = p + 1;
    this.reserved = reserved;
    // The trace id and span id fields (as writeIds(), written out here: a call left the DataView's writes as
    // calls too).
    p += 1 + reserved;
    buf[p] = SPAN_TRACE_ID;
    buf[p + 1] = 16;
    view.setInt32(p + 2, trace.t0);
    view.setInt32(p + 6, trace.t1);
    view.setInt32(p + 10, trace.t2);
    view.setInt32(p + 14, trace.t3);
    buf[p + 18] = SPAN_SPAN_ID;
    buf[p + 19] = 8;
    view.setInt32(p + 20, s0);
    view.setInt32(p + 24, s1);
    p += 28;
    if (state !== null) {
      buf[p] = SPAN_TRACE_STATE;
      w.pos = p + 1;
      w.string(state);
      buf = w.buf;
      view = w.view;
      p = w.pos;
    }
    if ((p0 | p1) !== 0) {
      buf[p] = SPAN_PARENT;
      buf[p + 1] = 8;
      view.setInt32(p + 2, p0);
      view.setInt32(p + 6, p1);
      p += 10;
    }
    buf[p] = SPAN_START;
    this.clock.write(view, p + 1, startMs);
    buf[p + 9] = SPAN_END;
    this.clock.write(view, p + 10, endMs);
    buf[p + 18] = (SPAN_FLAGS & 0x7f) | 0x80;
    buf[p + 19] = SPAN_FLAGS >>> 7;
    view.setUint32(p + 20, 1 | FLAGS_HAS_IS_REMOTE | (remote ? FLAGS_IS_REMOTE : 0), true);
    p += 24;
    // The name and kind (fields 5 and 6: protobuf's fields may come in any order), with the head's attributes.
    copyInto.call(buf, named, p);
    w.pos = p + named.length;
  }

  attr(key: string, value: AttributeValue): void {
    this.wire.keyValue(SPAN_ATTRIBUTE, this.keys.get(key), value);
  }

  attrOf(key: string, value: string | boolean): void {
    this.wire.bytes(this.keys.pair(key, value));
  }

  key(key: string): CompiledKey {
    return this.keys.get(key) as unknown as CompiledKey;
  }

  attrAt(key: CompiledKey, value: AttributeValue): void {
    this.wire.keyValue(SPAN_ATTRIBUTE, key as unknown as Buffer, value);
  }

  compileAttr(key: CompiledKey, value: AttributeValue): CompiledAttr {
    const k = key as unknown as Buffer;
    const w = new Wire(k.length + 24 + (typeof value === 'string' ? value.length * 3 : 0));
    w.keyValue(SPAN_ATTRIBUTE, k, value);
    return Buffer.from(w.buf.subarray(0, w.pos)) as unknown as CompiledAttr;
  }

  attrCompiled(attr: CompiledAttr): void {
    this.wire.bytes(attr as unknown as Buffer);
  }

  compileHead(name: string, kind: number, attrs: ReadonlyArray<readonly [string, AttributeValue]>, also: CompiledAttr | null = null, text: HeadText | null = null): CompiledHead {
    const w = new Wire(64 + name.length * 3);
    writeName(w, name, kind);
    for (const [key, value] of attrs) {
      if (typeof value === 'number') w.keyValue(SPAN_ATTRIBUTE, this.keys.get(key), value);
      else w.bytes(this.keys.pair(key, value));
    }
    if (also !== null) w.bytes(also as unknown as Buffer);
    if (text === null) return new Head(Buffer.from(w.buf.subarray(0, w.pos)), -1);
    // The text attribute but its characters: KeyValue { key, value: AnyValue { string_value: <length> } }, its
    // lengths one byte each (checked).
    const key = text.key as unknown as Buffer;
    const n = text.length;
    const any = 2 + n;
    const kv = key.length + 2 + any;
    if (!(Number.isInteger(n) && n >= 1 && kv < 0x80)) throw new Error(`a head's text attribute of ${n} characters: 1 to ${0x7f - 4 - key.length} with this name`);
    w.room(kv);
    w.byte(SPAN_ATTRIBUTE);
    w.byte(kv);
    w.bytes(key);
    w.byte(KV_VALUE);
    w.byte(any);
    w.byte(ANY_STRING);
    w.byte(n);
    return new Head(Buffer.from(w.buf.subarray(0, w.pos)), n);
  }

  /** A span's name and kind fields, encoded once per name (at most 256 names; the last one checked first). */
  private name(span: TraceSpan): Buffer {
    const name = span.name;
    let named = name === this.lastName ? this.lastNamed : this.names.get(name);
    if (named === undefined || named[named.length - 1] !== span.kind) {
      const w = new Wire(8 + name.length * 3);
      writeName(w, name, span.kind);
      named = Buffer.from(w.buf.subarray(0, w.pos));
      if (this.names.size < 256) this.names.set(name, named);
    }
    this.lastName = name;
    this.lastNamed = named;
    return named;
  }

  link(ref: SpanLink, key: string, value: string): void {
    const w = this.wire;
    w.room(48 + (ref.traceState === null ? 0 : ref.traceState.length * 3 + 6));
    // As in open(): the fixed fields through locals.
    const buf = w.buf;
    const view = w.view;
    const p = w.pos;
    buf[p] = SPAN_LINK;
    const at = p + 1;
    writeIds(buf, view, p + 2, ref);
    w.pos = p + 30;
    if (ref.traceState !== null) {
      w.byte(LINK_TRACE_STATE);
      w.string(ref.traceState);
    }
    w.bytes(this.linkTail(key, value, ref.sampled));
    w.close(at);
  }

  /**
   * A link's attribute and flags (another request's span: remote), as one run of bytes: made once for the
   * attribute every link of the proxy's carries, per sampled flag.
   */
  private linkTail(key: string, value: string, sampled: boolean): Buffer {
    if (key !== this.tailKey || value !== this.tailValue) {
      this.tails = [false, true].map((s) => {
        const w = new Wire(64);
        w.bytes(this.keys.pair(key, value, LINK_ATTRIBUTE));
        w.byte(LINK_FLAGS);
        w.fixed32((s ? 1 : 0) | FLAGS_HAS_IS_REMOTE | FLAGS_IS_REMOTE);
        return Buffer.from(w.buf.subarray(0, w.pos));
      });
      this.tailKey = key;
      this.tailValue = value;
    }
    return this.tails[sampled ? 1 : 0]!;
  }

  error(message: string): void {
    const w = this.wire;
    w.room(8);
    w.byte(SPAN_STATUS);
    const at = w.open();
    w.byte(STATUS_MESSAGE);
    w.string(message);
    w.room(2);
    w.byte(STATUS_CODE);
    w.byte(STATUS_ERROR);
    w.close(at);
  }

  close(): void {
    const w = this.wire;
    const at = this.spanAt;
    const reserved = this.reserved;
    const length = w.pos - at - reserved;
    const bytes = varintLength(length);
    if (bytes !== reserved) {
      // Its length needs more bytes than open() kept, or fewer: the span moves by the difference.
      w.room(bytes);
      w.buf.copyWithin(at + bytes, at + reserved, w.pos);
      w.pos += bytes - reserved;
    }
    writeVarint(w.buf, at, length);
    this.count += 1;
  }

  take(): Uint8Array {
    const w = this.wire;
    const spans = w.pos - this.head;
    const scopeSpans = this.scope.length + spans;
    const resourceSpans = this.resource.length + 1 + varintLength(scopeSpans) + scopeSpans;
    let p = this.head - this.scope.length;
    this.scope.copy(w.buf, p);
    p -= varintLength(scopeSpans) + 1;
    writeField(w.buf, p, RESOURCE_SPANS_SCOPE_SPANS, scopeSpans);
    p -= this.resource.length;
    this.resource.copy(w.buf, p);
    p -= varintLength(resourceSpans) + 1;
    writeField(w.buf, p, REQUEST_RESOURCE_SPANS, resourceSpans);
    const out = w.buf.subarray(p, w.pos);
    this.wire = new Wire(this.size, this.head, this.spares.pop() ?? Buffer.allocUnsafeSlow(this.size));
    this.count = 0;
    return out;
  }

  /** A batch's memory is its own (allocUnsafeSlow, never Node's shared pool), so the whole of it is reused. */
  recycle(body: Uint8Array): void {
    const ab = body.buffer as ArrayBuffer;
    if (this.spares.length < 4 && ab.byteLength >= this.size) this.spares.push(Buffer.from(ab, 0, ab.byteLength));
  }
}

/**
 * The trace id and span id fields (tag, length, big-endian words: 28 bytes) at `p`, as a Span and a Span.Link
 * both begin: their field numbers are the same (1 and 2).
 */
function writeIds(buf: Buffer, view: DataView, p: number, ids: SpanLink | TraceSpan): void {
  buf[p] = SPAN_TRACE_ID;
  buf[p + 1] = 16;
  view.setInt32(p + 2, ids.t0);
  view.setInt32(p + 6, ids.t1);
  view.setInt32(p + 10, ids.t2);
  view.setInt32(p + 14, ids.t3);
  buf[p + 18] = SPAN_SPAN_ID;
  buf[p + 19] = 8;
  view.setInt32(p + 20, ids.s0);
  view.setInt32(p + 24, ids.s1);
}

/** A span's name and kind fields. */
function writeName(w: Wire, name: string, kind: number): void {
  w.room(1);
  w.byte(SPAN_NAME);
  w.string(name);
  w.room(2);
  w.byte(SPAN_KIND);
  w.byte(kind);
}

/** A length-delimited field's tag and length at `pos`. */
function writeField(buf: Buffer, pos: number, fieldTag: number, length: number): void {
  buf[pos] = fieldTag;
  writeVarint(buf, pos + 1, length);
}

function writeVarint(buf: Buffer, pos: number, n: number): void {
  while (n > 0x7f) {
    buf[pos++] = (n & 0x7f) | 0x80;
    n >>>= 7;
  }
  buf[pos] = n;
}
