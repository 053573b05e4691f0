import { Clock, type CompiledAttr, type CompiledHead, type CompiledKey, type Envelope, type HeadText, type SpanEncoder } from './encoder.js';
import { hex, type AttributeValue, type SpanLink, type TraceSpan } from './span.js';

// OTLP/JSON (tracing.protocol: http/json): the same request as
// src/tracing/otlp-protobuf.ts in the protobuf JSON mapping OTLP specifies
// (ids as hex, times and 64-bit integers as decimal strings, enums as
// numbers). Each ended span becomes one JSON text; take() joins them inside
// the envelope, whose text is built once.

function anyValue(value: AttributeValue): string {
  if (typeof value === 'string') return `{"stringValue":${JSON.stringify(value)}}`;
  if (typeof value === 'boolean') return `{"boolValue":${value}}`;
  return Number.isInteger(value) ? `{"intValue":"${value}"}` : `{"doubleValue":${JSON.stringify(value)}}`;
}

/** What compileHead() returns here: the span's name and kind, its attributes' JSON, and its text attribute's name and length (null: none). */
interface Head extends CompiledHead {
  readonly name: string;
  readonly kind: number;
  readonly json: string;
  readonly textKey: string | null;
  readonly textLength: number;
}

/** A head's text attribute's value, as ProtobufSpans writes it: `n` characters, `?` for any beyond ASCII or missing. */
function fixedAscii(s: string | null, n: number): string {
  let out = '';
  for (let i = 0; i < n; i++) {
    const c = s !== null && i < s.length ? s.charCodeAt(i) : 0x3f;
    out += String.fromCharCode(c < 0x80 ? c : 0x3f);
  }
  return out;
}

const keyValue = (key: string, value: AttributeValue): string => `{"key":${JSON.stringify(key)},"value":${anyValue(value)}}`;

export class JsonSpans implements SpanEncoder {
  readonly contentType = 'application/json';
  private spans: string[] = [];
  private readonly before: string;
  private readonly after = ']}]}]}';
  // The span being written: its fields so far, its attributes, its link and status.
  private text = '';
  private attrText = '';
  private tail = '';

  constructor(envelope: Envelope, private readonly clock = new Clock()) {
    const resource = Object.entries(envelope.resource).map(([k, v]) => keyValue(k, v)).join(',');
    const scope = `{"name":${JSON.stringify(envelope.scopeName)},"version":${JSON.stringify(envelope.scopeVersion)}}`;
    this.before = `{"resourceSpans":[{"resource":{"attributes":[${resource}]},"scopeSpans":[{"scope":${scope},"spans":[`;
  }

  get count(): number {
    return this.spans.length;
  }

  open(span: TraceSpan, endMs: number, head: CompiledHead | null = null, text: string | null = null): void {
    const h = head as Head | null;
    this.begin(span, span.s0, span.s1, span.p0, span.p1, span.remoteParent, span.start, endMs, h === null ? span.name : h.name, h === null ? span.kind : h.kind);
    this.attrText = h === null ? '' : h.json;
    if (h !== null && h.textKey !== null) this.attr(h.textKey, fixedAscii(text, h.textLength));
    const attrs = span.attrs;
    if (attrs !== null) for (let i = 0; i < attrs.length; i += 2) this.attr(attrs[i] as string, attrs[i + 1]!);
  }

  openChild(parent: TraceSpan, s0: number, s1: number, startMs: number, endMs: number, head: CompiledHead): void {
    const h = head as Head;
    this.begin(parent, s0, s1, parent.s0, parent.s1, false, startMs, endMs, h.name, h.kind);
    this.attrText = h.json;
    if (h.textKey !== null) this.attr(h.textKey, fixedAscii(null, h.textLength));
  }

  /** A span's fields but its attributes, link and status: the trace id and trace state of `trace`, the rest as given. */
  private begin(trace: TraceSpan, s0: number, s1: number, p0: number, p1: number, remote: boolean, startMs: number, endMs: number, name: string, kind: number): void {
    const parent = (p0 | p1) === 0 ? '' : `,"parentSpanId":"${hex(p0)}${hex(p1)}"`;
    const state = trace.traceState === null ? '' : `,"traceState":${JSON.stringify(trace.traceState)}`;
    const flags = 0x101 | (remote ? 0x200 : 0);
    this.text = `{"traceId":"${hex(trace.t0)}${hex(trace.t1)}${hex(trace.t2)}${hex(trace.t3)}","spanId":"${hex(s0)}${hex(s1)}"${state}${parent},`
      + `"flags":${flags},"name":${JSON.stringify(name)},"kind":${kind},`
      + `"startTimeUnixNano":"${this.clock.decimal(startMs)}","endTimeUnixNano":"${this.clock.decimal(endMs)}"`;
    this.tail = '';
  }

  attr(key: string, value: AttributeValue): void {
    this.attrText += (this.attrText === '' ? '' : ',') + keyValue(key, value);
  }

  attrOf(key: string, value: string | boolean): void {
    this.attr(key, value);
  }

  key(key: string): CompiledKey {
    return { key: true, name: key } as CompiledKey;
  }

  attrAt(key: CompiledKey, value: AttributeValue): void {
    this.attr((key as CompiledKey & { name: string }).name, value);
  }

  compileAttr(key: CompiledKey, value: AttributeValue): CompiledAttr {
    return { attr: true, json: keyValue((key as CompiledKey & { name: string }).name, value) } as CompiledAttr;
  }

  attrCompiled(attr: CompiledAttr): void {
    const json = (attr as CompiledAttr & { json: string }).json;
    this.attrText += (this.attrText === '' ? '' : ',') + json;
  }

  compileHead(name: string, kind: number, attrs: ReadonlyArray<readonly [string, AttributeValue]>, also: CompiledAttr | null = null, text: HeadText | null = null): CompiledHead {
    const parts = attrs.map(([key, value]) => keyValue(key, value));
    if (also !== null) parts.push((also as CompiledAttr & { json: string }).json);
    const head: Head = {
      compiled: true, name, kind, json: parts.join(','),
      textKey: text === null ? null : (text.key as CompiledKey & { name: string }).name, textLength: text === null ? 0 : text.length,
    };
    return head;
  }

  link(ref: SpanLink, key: string, value: string): void {
    const state = ref.traceState === null ? '' : `,"traceState":${JSON.stringify(ref.traceState)}`;
    this.tail += `,"links":[{"traceId":"${hex(ref.t0)}${hex(ref.t1)}${hex(ref.t2)}${hex(ref.t3)}","spanId":"${hex(ref.s0)}${hex(ref.s1)}"${state},"attributes":[${keyValue(key, value)}],"flags":${(ref.sampled ? 1 : 0) | 0x300}}]`;
  }

  error(message: string): void {
    this.tail += `,"status":{"code":2,"message":${JSON.stringify(message)}}`;
  }

  close(): void {
    this.spans.push(`${this.text},"attributes":[${this.attrText}]${this.tail}}`);
  }

  recycle(): void {
    // A JSON request is a string made into bytes: nothing to reuse.
  }

  take(): Uint8Array {
    const body = Buffer.from(this.before + this.spans.join(',') + this.after);
    this.spans = [];
    return body;
  }
}
