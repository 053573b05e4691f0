import type { CompiledHead, SpanEncoder } from './encoder.js';
import type { SpanSink, TraceSpan } from './span.js';

// The recorder: ended spans are written into the export request being built
// (src/tracing/encoder.ts) and die young; full requests are handed to the
// exporter (OTLP/HTTP, src/tracing/start.ts and src/tracing/otlp-http.ts) in
// the background. What the batch span processor's OTEL_BSP_* variables set
// means the same here: a request goes when it holds maxBatch spans or when
// the oldest span in it is delayMs old, and spans that would take the spans
// not yet exported past maxQueue are dropped (counted; never a request).

export interface Export {
  /** Sends one request; resolves when it was accepted, rejects when it was not. */
  send(body: Uint8Array, spans: number): Promise<void>;
  shutdown(): Promise<void>;
}

/** Why spans were lost: the label of idempotency_proxy_tracing_spans_lost_total. */
export type LossCause = 'queue_full' | 'export_failed';

export interface RecorderOptions {
  readonly maxQueue: number;
  readonly maxBatch: number;
  readonly delayMs: number;
  /** Exports at once, at most. */
  readonly concurrency: number;
  /** Spans dropped: a full queue (`queue_full`), or an export that failed (`export_failed`, with why). */
  readonly onLoss: (spans: number, cause: LossCause, reason: string) => void;
}

export class Recorder implements SpanSink {
  /** Spans recorded and not yet exported (being written, waiting, being sent). */
  private queued = 0;
  private readonly waiting: Array<{ body: Uint8Array; spans: number }> = [];
  private sending = 0;
  private timer: NodeJS.Timeout | null = null;
  private idle: Array<() => void> = [];

  constructor(readonly encoder: SpanEncoder, private readonly exporter: Export, private readonly opts: RecorderOptions) {}

  /**
   * The encoder to write an ended span into, or null when the queue is full (the span is dropped). Then close().
   * `head`: the span's name, kind and small-set attributes, compiled by the encoder (SpanEncoder.compileHead);
   * `text`: the value of its text attribute, if it has one.
   */
  open(span: TraceSpan, endMs: number, head: CompiledHead | null = null, text: string | null = null): SpanEncoder | null {
    if (this.full()) return null;
    this.encoder.open(span, endMs, head, text);
    return this.encoder;
  }

  /** The same for a child of `parent` that has ended, with no TraceSpan of its own (SpanEncoder.openChild). */
  openChild(parent: TraceSpan, s0: number, s1: number, startMs: number, endMs: number, head: CompiledHead): SpanEncoder | null {
    if (this.full()) return null;
    this.encoder.openChild(parent, s0, s1, startMs, endMs, head);
    return this.encoder;
  }

  /** Whether the queue holds maxQueue spans: the span about to be written is dropped, and counted. */
  private full(): boolean {
    if (this.queued < this.opts.maxQueue) return false;
    this.opts.onLoss(1, 'queue_full', 'the span queue is full');
    return true;
  }

  close(): void {
    this.encoder.close();
    this.queued += 1;
    if (this.encoder.count >= this.opts.maxBatch) this.seal();
    else if (this.timer === null) {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.seal();
      }, this.opts.delayMs);
      this.timer.unref();
    }
  }

  /** A child span that ended: its attributes, error and name as set while it ran. */
  record(span: TraceSpan, endMs: number): void {
    const enc = this.open(span, endMs);
    if (enc === null) return;
    if (span.error !== null) enc.error(span.error);
    this.close();
  }

  /** Sends what is recorded and waits for every export to end; then the exporter shuts down. */
  async shutdown(): Promise<void> {
    this.seal();
    if (this.sending > 0 || this.waiting.length > 0) await new Promise<void>((resolve) => this.idle.push(resolve));
    await this.exporter.shutdown();
  }

  private seal(): void {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const spans = this.encoder.count;
    if (spans === 0) return;
    this.waiting.push({ body: this.encoder.take(), spans });
    this.pump();
  }

  private pump(): void {
    while (this.sending < this.opts.concurrency && this.waiting.length > 0) {
      const { body, spans } = this.waiting.shift()!;
      this.sending += 1;
      this.exporter.send(body, spans).then(
        () => {
          this.encoder.recycle(body);
          this.sent(spans);
        },
        (err: unknown) => {
          this.opts.onLoss(spans, 'export_failed', `the export failed: ${(err as Error)?.message ?? String(err)}`);
          this.sent(spans);
        },
      );
    }
  }

  private sent(spans: number): void {
    this.sending -= 1;
    this.queued -= spans;
    this.pump();
    if (this.sending === 0 && this.waiting.length === 0) {
      const idle = this.idle;
      this.idle = [];
      for (const resolve of idle) resolve();
    }
  }
}
