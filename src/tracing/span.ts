// One span as the recorder keeps it until it ends (docs/operations.md,
// Tracing: how spans are recorded). Ids are 32-bit words drawn from a random
// pool (src/tracing/ids.ts), times are performance.now() milliseconds; the
// span is encoded into the export batch when it ends and dies young. Nothing
// here allocates but the span itself and, for a child span that gets
// attributes, one small array.

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

/** Where an ended child span goes: the recorder (src/tracing/recorder.ts). */
export interface SpanSink {
  record(span: TraceSpan, endMs: number): void;
}

export class TraceSpan {
  /** Attributes set before the end, key and value in turn (child spans only: the server span's are written at its end). */
  attrs: AttributeValue[] | null = null;
  /** The status message of a failed span; null: status unset. */
  error: string | null = null;
  /** The execution a replay links to. */
  link: SpanRef | null = null;

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

  /** Ends a child span: the recorder encodes it now. */
  end(): void {
    if (this.sink !== null) this.sink.record(this, performance.now());
  }

  /** `00-<trace id>-<span id>-<flags>`: this span as a parent (W3C Trace Context). */
  traceparent(): string {
    return `00-${hex(this.t0)}${hex(this.t1)}${hex(this.t2)}${hex(this.t3)}-${hex(this.s0)}${hex(this.s1)}-0${this.sink === null ? 0 : 1}`;
  }
}

function hex(w: number): string {
  return (w >>> 0).toString(16).padStart(8, '0');
}

/** The four words of a 32-digit hex trace id, or the two of a 16-digit span id, at `at`. */
export function word(id: string, at: number): number {
  return Number.parseInt(id.slice(at * 8, at * 8 + 8), 16) | 0;
}
