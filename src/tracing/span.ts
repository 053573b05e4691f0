// One span as the recorder keeps it until it ends (docs/operations.md,
// Tracing: how spans are recorded). Ids are 32-bit words drawn from a random
// pool (src/tracing/ids.ts), times are performance.now() milliseconds; the
// span is encoded into the export batch when it ends and dies young. Nothing
// here allocates but the span itself and, for a child span that gets
// attributes, one small array.

import { performance } from 'node:perf_hooks';

/** OTLP's SpanKind values (opentelemetry/proto/trace/v1/trace.proto). */
export const INTERNAL = 1;
export const SERVER = 2;
export const CLIENT = 3;

export type AttributeValue = string | number | boolean;

/** A span context another span refers to: a parent from the client, or the execution a replay links to. */
export interface SpanRef {
  readonly traceId: string; // 32 lower-case hex digits
  readonly spanId: string; // 16
  readonly sampled: boolean;
  readonly traceState: string | null;
}

/** A span a replay's span links to (the execution it replays), its ids as 32-bit words like a TraceSpan's. */
export interface SpanLink {
  readonly t0: number; readonly t1: number; readonly t2: number; readonly t3: number;
  readonly s0: number; readonly s1: number;
  readonly sampled: boolean;
  readonly traceState: string | null;
}

/** A SpanRef (hex ids, as the W3C propagator reads them) as a link. */
export function linkOf(ref: SpanRef): SpanLink {
  return {
    t0: word(ref.traceId, 0), t1: word(ref.traceId, 1), t2: word(ref.traceId, 2), t3: word(ref.traceId, 3),
    s0: word(ref.spanId, 0), s1: word(ref.spanId, 1), sampled: ref.sampled, traceState: ref.traceState,
  };
}

/** Where an ended child span goes: the recorder (src/tracing/recorder.ts). */
export interface SpanSink {
  record(span: TraceSpan, endMs: number): void;
}

export class TraceSpan {
  /** Attributes set before the end, key and value in turn (child spans only: the server span's are written at its end). */
  attrs: AttributeValue[] | null = null;
  /** The status message of a failed span; null: status unset. */
  error: string | null = null;
  /** A replay's: the traceparent its record kept of the execution it replays, which its span links to (read when it ends). */
  linked: string | null = null;
  /**
   * A server span's: the span id of the request's upstream call while it runs (RequestTracing.upstreamStart), its
   * span written when the call ends, as a store round trip's is: no TraceSpan of its own.
   */
  u0 = 0;
  u1 = 0;
  private tp: string | null = null;

  constructor(
    /** null: not sampled. The span still has ids (its trace context reaches the upstream) but records nothing. */
    readonly sink: SpanSink | null,
    readonly t0: number, readonly t1: number, readonly t2: number, readonly t3: number,
    readonly s0: number, readonly s1: number,
    /** The parent span id; 0, 0 for a root span. */
    readonly p0: number, readonly p1: number,
    /** Whether the parent came from the client (OTLP's span flags say so). */
    readonly remoteParent: boolean,
    readonly traceState: string | null,
    public name: string,
    readonly kind: number,
    readonly start: number,
  ) {}

  get sampled(): boolean {
    return this.sink !== null;
  }

  setAttribute(key: string, value: AttributeValue): void {
    if (this.sink === null) return;
    if (this.attrs === null) this.attrs = [key, value];
    else this.attrs.push(key, value);
  }

  fail(message: string): void {
    if (this.sink !== null) this.error = message;
  }

  /** Ends a child span (now, or at `endMs`): the recorder encodes it now. */
  end(endMs: number = performance.now()): void {
    if (this.sink !== null) this.sink.record(this, endMs);
  }

  /** `00-<trace id>-<span id>-<flags>`: this span as a parent (W3C Trace Context); made once (an unsampled request's upstream header, the record's trace context). */
  traceparent(): string {
    if (this.tp !== null) return this.tp;
    return (this.tp = traceparentOf(this, this.s0, this.s1));
  }
}

/**
 * `00-<trace id>-<span id>-<flags>` for a span of `trace`'s trace (its trace id and sampled flag) whose span id is
 * `s0`, `s1`: the traceparent naming it as a parent (W3C Trace Context).
 */
export function traceparentOf(trace: TraceSpan, s0: number, s1: number): string {
  const view = TRACEPARENT_OUT_VIEW;
  hexAt(view, 3, trace.t0);
  hexAt(view, 11, trace.t1);
  hexAt(view, 19, trace.t2);
  hexAt(view, 27, trace.t3);
  hexAt(view, 36, s0);
  hexAt(view, 44, s1);
  TRACEPARENT_OUT[54] = trace.sink === null ? 48 : 49;
  return latin1Slice.call(TRACEPARENT_OUT, 0, 55);
}

/** The character codes of the lower-case hex digits. */
const DIGIT = Array.from('0123456789abcdef', (c) => c.charCodeAt(0));

/**
 * A 32-bit word as 8 lower-case hex digits (OTLP/JSON's ids). Made from character codes: Number#toString(16)
 * takes about ten times as long (V8 converts through its general radix path). A traceparent is written by
 * hexAt() below instead.
 */
export function hex(w: number): string {
  return String.fromCharCode(
    DIGIT[(w >>> 28) & 15]!, DIGIT[(w >>> 24) & 15]!, DIGIT[(w >>> 20) & 15]!, DIGIT[(w >>> 16) & 15]!,
    DIGIT[(w >>> 12) & 15]!, DIGIT[(w >>> 8) & 15]!, DIGIT[(w >>> 4) & 15]!, DIGIT[w & 15]!,
  );
}

/** The two lower-case hex digits of each byte value as a little-endian 16-bit word: the first digit in the low byte. */
const HEX_WORD = Uint16Array.from({ length: 256 }, (_, b) => DIGIT[b >>> 4]! | (DIGIT[b & 15]! << 8));

/**
 * Where traceparent() writes a traceparent's characters before reading them as one string: its fixed characters
 * (`00-`, the dashes, the flags' `0`) written once, its digits by every call. Made from six hex() strings
 * instead (String.fromCharCode, eight digits a call), a traceparent cost about 1.9 K instructions on Node 20;
 * written here and read by one Buffer#latin1Slice, about a third of that (bench/trace-loop.ts --shape newkey
 * under callgrind; docs/tracing-cost.md, 2026-12-05, late morning). Written and read within one synchronous
 * call: one buffer for the process is enough.
 */
const TRACEPARENT_OUT = Buffer.allocUnsafeSlow(55);
TRACEPARENT_OUT.write(`00-${'.'.repeat(32)}-${'.'.repeat(16)}-0.`, 'latin1');
const TRACEPARENT_OUT_VIEW = new DataView(TRACEPARENT_OUT.buffer, TRACEPARENT_OUT.byteOffset, TRACEPARENT_OUT.length);

/** A 32-bit word's 8 hex digits written at `at`: two 32-bit writes of two digit pairs each. */
function hexAt(view: DataView, at: number, w: number): void {
  view.setUint32(at, HEX_WORD[w >>> 24]! | (HEX_WORD[(w >>> 16) & 255]! << 16), true);
  view.setUint32(at + 4, HEX_WORD[(w >>> 8) & 255]! | (HEX_WORD[w & 255]! << 16), true);
}

/**
 * Buffer#latin1Slice, called through a constant, as latin1Write below: not in Node's documentation, but on
 * Buffer.prototype in every version the proxy runs on; test/tracing/traceparent.test.ts checks that it is there
 * and reads what Buffer#toString does in Latin-1.
 */
const latin1Slice = (Buffer.prototype as unknown as { latin1Slice: (this: Buffer, start: number, end: number) => string }).latin1Slice;

/** The four words of a 32-digit hex trace id, or the two of a 16-digit span id, at `at`. */
export function word(id: string, at: number): number {
  return Number.parseInt(id.slice(at * 8, at * 8 + 8), 16) | 0;
}

/**
 * The value of each pair of lower-case hex digits (0 to 255), at (first << 8 | second) of their bytes; -1 for
 * every other pair of bytes (a byte of 128 or more included). Two digits a lookup, four digits a read of
 * memory (DataView#getUint32, big-endian: the first digit in the top byte).
 */
const HEX_PAIR = new Int16Array(1 << 16).fill(-1);
for (let i = 0; i < 16; i++) {
  for (let j = 0; j < 16; j++) HEX_PAIR[(DIGIT[i]! << 8) | DIGIT[j]!] = (i << 4) | j;
}

/**
 * Where ownTraceparent() reads a traceparent's characters as bytes. Read in place, each character costs the
 * compiled code a dispatch on the string's representation (flat, sliced, cons…): about 25 instructions a
 * character, and 48 of those inlined made about 12 KB of machine code, which in the proxy missed the
 * instruction cache on every replay (about 170 misses a replay, counted by callgrind's cache simulation).
 * One write of the string as Latin-1 (Buffer#latin1Write: about 0.45 K instructions on Node 20, mostly C++; a fast
 * API call on Node 22 and later) and reads from memory are shorter in both.
 * Written and read within one synchronous call: one buffer for the process is enough.
 */
const TRACEPARENT_BYTES = Buffer.allocUnsafeSlow(64);
const TRACEPARENT_VIEW = new DataView(TRACEPARENT_BYTES.buffer, TRACEPARENT_BYTES.byteOffset, 64);
const LINK_WORDS = new Int32Array(6);
/** What ownTraceparent() returns, written over by each call: read at once (a replay's span is encoded as soon as the link is read). */
const LINK: { -readonly [K in keyof SpanLink]: SpanLink[K] } = { t0: 0, t1: 0, t2: 0, t3: 0, s0: 0, s1: 0, sampled: false, traceState: null };

/**
 * Buffer#latin1Write, called through a constant: what Buffer#write(…, 'latin1') calls once it has checked its
 * arguments and looked the encoding up. On Node 20 those steps were most of the write's cost (about 0.6 K of
 * tracing's 10.5 K instructions a replay, bench/trace-loop.ts under callgrind; docs/tracing-cost.md), and
 * `b.write` missed its property lookup on every call. Not in Node's documentation, but on Buffer.prototype in
 * every version the proxy runs on (Node 20, 22, 24, 26): test/tracing/traceparent.test.ts checks that it is there
 * and writes what Buffer#write does.
 */
const latin1Write = (Buffer.prototype as unknown as { latin1Write: (this: Buffer, s: string, at: number, n: number) => number }).latin1Write;

/**
 * What TraceSpan.traceparent() writes — `00-<32 hex>-<16 hex>-0<0|1>`, lower-case, ids not all zero — read
 * straight into words: the link of a replay to the execution whose record kept it. null for anything else.
 * The link returned is one object for the process, written over by the next call: encode it before then.
 * A character beyond Latin-1 is read as its low byte (its Latin-1 write): such a value can only come from a
 * record damaged in the database, and is read as damaged digits would be (a link to another span, never a
 * malformed one).
 */
export function ownTraceparent(tp: string): SpanLink | null {
  if (tp.length !== 55) return null;
  const b = TRACEPARENT_BYTES;
  latin1Write.call(b, tp, 0, 55);
  if (b[0] !== 48 || b[1] !== 48 || b[2] !== 45 || b[35] !== 45 || b[52] !== 45 || b[53] !== 48) return null;
  const flag = b[54];
  if (flag !== 48 && flag !== 49) return null;
  // The six words of the ids, eight digits a word: two reads of four bytes, four lookups. In a loop: unrolled,
  // reads like these made about 4 KB of machine code (or calls where the compiler stopped inlining).
  const view = TRACEPARENT_VIEW;
  const words = LINK_WORDS;
  let bad = 0;
  for (let k = 0; k < 6; k++) {
    const at = k < 4 ? 3 + 8 * k : 4 + 8 * k; // 3, 11, 19, 27 (the trace id), 36, 44 (the span id)
    const hi = view.getUint32(at);
    const lo = view.getUint32(at + 4);
    const a = HEX_PAIR[hi >>> 16]!;
    const c = HEX_PAIR[hi & 0xffff]!;
    const e = HEX_PAIR[lo >>> 16]!;
    const g = HEX_PAIR[lo & 0xffff]!;
    // Negative: a pair that is not two lower-case hex digits.
    bad |= a | c | e | g;
    words[k] = (a << 24) | (c << 16) | (e << 8) | g;
  }
  if (bad < 0) return null;
  const t0 = words[0]!, t1 = words[1]!, t2 = words[2]!, t3 = words[3]!, s0 = words[4]!, s1 = words[5]!;
  if ((t0 | t1 | t2 | t3) === 0 || (s0 | s1) === 0) return null;
  const link = LINK;
  link.t0 = t0;
  link.t1 = t1;
  link.t2 = t2;
  link.t3 = t3;
  link.s0 = s0;
  link.s1 = s1;
  link.sampled = flag === 49;
  return link;
}
