import { performance } from 'node:perf_hooks';
import type { AttributeValue, SpanLink, TraceSpan } from './span.js';

// What the recorder writes an ended span into: the export request being
// built, in OTLP/protobuf (src/tracing/otlp-protobuf.ts) or OTLP/JSON
// (src/tracing/otlp-json.ts). A span is written in one pass, in this order:
// open, any attributes, at most one link, at most one status, close.

export interface SpanEncoder {
  /** The Content-Type of the requests take() returns. */
  readonly contentType: string;
  /** Spans written since the last take(). */
  readonly count: number;
  /**
   * Starts the span. `head`: its name, kind and small-set attributes, made by compileHead() (the server span's,
   * which share theirs with every request of the same route and result); without one the span's own name and
   * kind are written. `text`: the value of the head's text attribute, when compileHead() was given one (else
   * ignored): exactly its length in ASCII characters, as a hashed key is; a character beyond ASCII, or one
   * missing, is written as `?`, and characters past the length are left out.
   */
  open(span: TraceSpan, endMs: number, head?: CompiledHead | null, text?: string | null): void;
  /**
   * Starts a child of `parent` that has already ended, with no TraceSpan of its own (a store round trip's span,
   * made when its round trip is over): its trace id and trace state are its parent's, its parent id is the
   * parent's span id, `s0`, `s1` its own span id. `head`: its name, kind and attributes, from compileHead().
   */
  openChild(parent: TraceSpan, s0: number, s1: number, startMs: number, endMs: number, head: CompiledHead): void;
  attr(key: string, value: AttributeValue): void;
  /** The same, for a value of a small set (a method, a route name, an outcome): its encoding is kept and reused. */
  attrOf(key: string, value: string | boolean): void;
  /** An attribute name, encoded once for attrAt(). */
  key(key: string): CompiledKey;
  /** The same as attr(), for a name key() encoded. */
  attrAt(key: CompiledKey, value: AttributeValue): void;
  /**
   * An attribute of a name key() encoded and a value that repeats from span to span for a while (a route's path),
   * encoded whole for attrCompiled().
   */
  compileAttr(key: CompiledKey, value: AttributeValue): CompiledAttr;
  /** An attribute compileAttr() encoded. */
  attrCompiled(attr: CompiledAttr): void;
  /**
   * A span's name and kind with attributes whose values come from small sets (a method, a route name, an
   * outcome, a status code), encoded once for open()'s head; then `also` (an attribute compileAttr() encoded: a
   * route's path), and last `text`, an attribute whose value open() is given with the head (a hashed key: the
   * same length on every span, so that all of the attribute but its characters is encoded here).
   */
  compileHead(name: string, kind: number, attrs: ReadonlyArray<readonly [string, AttributeValue]>, also?: CompiledAttr | null, text?: HeadText | null): CompiledHead;
  link(ref: SpanLink, key: string, value: string): void;
  /** An error status with its message. */
  error(message: string): void;
  close(): void;
  /** The export request of every span written since the last take(), ready to send; the encoder starts afresh. */
  take(): Uint8Array;
  /** A request take() returned, sent and done with: its memory may be written into again. */
  recycle(body: Uint8Array): void;
}

/** What an encoder's compileHead() returns: its own encoding of a span's name, kind and attributes, opaque to the rest. */
export interface CompiledHead {
  readonly compiled: true;
}

/** A head's text attribute (SpanEncoder.compileHead): its name, encoded by key(), and its value's length in characters (short: name and value together under 120). */
export interface HeadText {
  readonly key: CompiledKey;
  readonly length: number;
}

/** What an encoder's key() returns: an attribute name in its own encoding. */
export interface CompiledKey {
  readonly key: true;
}

/** What an encoder's compileAttr() returns: a whole attribute in its own encoding. */
export interface CompiledAttr {
  readonly attr: true;
}

/** The resource and instrumentation scope every request carries. */
export interface Envelope {
  readonly resource: Readonly<Record<string, AttributeValue>>;
  readonly scopeName: string;
  readonly scopeVersion: string;
}

/** Nanoseconds since the Unix epoch of a performance.now() reading, in two 32-bit halves. */
export class Clock {
  private readonly originLo: number;
  private readonly originHi: number;
  private readonly origin: bigint;

  constructor(timeOriginMs: number = performance.timeOrigin) {
    this.origin = BigInt(Math.round(timeOriginMs * 1000)) * 1000n;
    this.originLo = Number(this.origin & 0xffffffffn);
    this.originHi = Number(this.origin >> 32n);
  }

  /** Writes the time as a little-endian fixed64 at `pos`. */
  write(view: DataView, pos: number, ms: number): void {
    // Exact in doubles: t is an integer below 2^53, and 2^32 a power of two. Not t % 2^32, which the optimizing
    // compiler makes a call to C's fmod.
    const t = Math.round(ms * 1e6);
    const tHi = Math.floor(t / 4294967296);
    let lo = this.originLo + (t - tHi * 4294967296);
    let hi = this.originHi + tHi;
    if (lo >= 4294967296) {
      lo -= 4294967296;
      hi += 1;
    }
    // Through a DataView, which the optimizing compiler inlines (Buffer#writeUInt32LE checks its arguments on every call).
    view.setUint32(pos, lo, true);
    view.setUint32(pos + 4, hi, true);
  }

  /** The same as a decimal string (OTLP/JSON). */
  decimal(ms: number): string {
    return (this.origin + BigInt(Math.round(ms * 1e6))).toString();
  }
}
