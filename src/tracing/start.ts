import { readFileSync } from 'node:fs';
import { ROOT_CONTEXT, trace, type TextMapGetter } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPExporterBase, createOtlpNetworkExportDelegate } from '@opentelemetry/otlp-exporter-base';
import { convertLegacyHttpOptions, createOtlpHttpExporterMetrics } from '@opentelemetry/otlp-exporter-base/node-http';
import { JsonTraceSerializer, ProtobufTraceSerializer, type IExportTraceServiceResponse, type ISerializer } from '@opentelemetry/otlp-transformer';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import type { TracingConfig } from '../config/types.js';
import { MAX_TIMED_MS } from '../config/units.js';
import type { Envelope, SpanEncoder } from './encoder.js';
import { IdPool } from './ids.js';
import { RetryingTransport, UndiciOtlpTransport, tlsFromEnv } from './otlp-http.js';
import { JsonSpans } from './otlp-json.js';
import { ProtobufSpans } from './otlp-protobuf.js';
import { Recorder, type Export, type LossCause } from './recorder.js';
import { samplerFrom, type Sampler } from './sampler.js';
import type { AttributeValue, SpanRef } from './span.js';
import { RequestTracing, type TraceContextReader } from './spans.js';

// Tracing's start-up, imported by src/app.ts only when tracing is on
// (docs/operations.md, Tracing: packages). Spans are recorded by our own
// recorder (src/tracing/recorder.ts), encoded as they end; how they are
// sent is OpenTelemetry's: the OTLP export delegate and HTTP configuration of
// @opentelemetry/otlp-exporter-base (endpoint, headers, timeout, compression
// from the standard OTEL_EXPORTER_OTLP_* variables), over our undici
// transport with its exporters' retry policy (src/tracing/otlp-http.ts: not
// node:http, whose client would share the server's code paths); the resource
// from @opentelemetry/resources (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME),
// the W3C propagator of @opentelemetry/core for every traceparent read.

/** Export requests in flight at most (the recorder's limit, and the connections to the collector). */
const EXPORTS_IN_FLIGHT = 4;

export interface StartedTracing {
  readonly tracing: RequestTracing;
  readonly sampler: Sampler;
  /** The batch processor's settings in force (OTEL_BSP_*), for the start-up log. */
  readonly batch: BatchOptions;
  /** Exports what is recorded, then stops. */
  shutdown(): Promise<void>;
}

export interface TracingHooks {
  /** Spans lost: a full queue or a failed export (src/app.ts counts them and logs them, at most every 10 s). */
  readonly onLoss: (spans: number, cause: LossCause, reason: string) => void;
}

/** The instrumentation scope's version: the proxy's own, from its package.json (dist/src/tracing/ → the root). */
function proxyVersion(): string {
  return (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}

export function startTracing(config: TracingConfig, hooks: TracingHooks, env: NodeJS.ProcessEnv = process.env): StartedTracing {
  const sampler = samplerFrom(config.sampleRatio, env);
  const version = proxyVersion();
  const encoder = encoderFor(config, envelope(config, env, version));
  const batch = batchOptions(env);
  checkExportTimeouts(env);
  const recorder = new Recorder(encoder, exporter(config, encoder.contentType, env, version), {
    ...batch,
    concurrency: EXPORTS_IN_FLIGHT,
    onLoss: hooks.onLoss,
  });
  return {
    tracing: new RequestTracing(recorder, sampler, new IdPool(), traceContextReader()),
    sampler,
    batch,
    shutdown: () => recorder.shutdown(),
  };
}

function encoderFor(config: TracingConfig, env: Envelope): SpanEncoder {
  return config.protocol === 'http/json' ? new JsonSpans(env) : new ProtobufSpans(env);
}

/** The resource as the SDK would build it: its defaults, then OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME, then ours. */
function envelope(config: TracingConfig, env: NodeJS.ProcessEnv, version: string): Envelope {
  const service = config.serviceName ?? env.OTEL_SERVICE_NAME ?? 'idempotency-proxy';
  const resource = defaultResource().merge(detectResources({ detectors: [envDetector] })).merge(resourceFromAttributes({ 'service.name': service }));
  const attributes: Record<string, AttributeValue> = {};
  for (const [k, v] of Object.entries(resource.attributes)) {
    if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') attributes[k] = v;
  }
  return { resource: attributes, scopeName: 'idempotency-proxy', scopeVersion: version };
}

/**
 * The batch processor's variables, with two defaults of our own (docs/operations.md, Tracing: batching):
 * requests of up to 4 096 spans (OTEL_BSP_MAX_EXPORT_BATCH_SIZE; the SDK's 512), sent at least every 5 s
 * (OTEL_BSP_SCHEDULE_DELAY), and a queue of 16 384 spans (OTEL_BSP_MAX_QUEUE_SIZE; the SDK's 2 048).
 * Every export costs the proxy a fixed amount of CPU whatever its size — an HTTP request on its event loop,
 * about 0.5 ms on the reference machine — so at 5 000 requests a second, 512 spans a request was 20 to 40
 * exports a second and about 4 % of a replay's CPU; and 2 048 queued spans are a tenth of a second of spans,
 * which one slow export would have dropped.
 */
export const DEFAULT_MAX_EXPORT_BATCH = 4_096;
const DEFAULT_MAX_QUEUE = 16_384;

export interface BatchOptions {
  readonly maxQueue: number;
  readonly maxBatch: number;
  readonly delayMs: number;
}

/** A whole number above 0 (at most `max`) from the variable `name`, or `fallback` when it is unset or empty. */
function wholeNumber(env: NodeJS.ProcessEnv, name: string, fallback: number, max = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const n = Number(raw.trim());
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name}=${raw}: a whole number above 0`);
  if (n > max) throw new Error(`${name}=${raw}: at most ${max}`);
  return n;
}

/**
 * The export timeout (OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT, milliseconds) is read by OpenTelemetry's exporter
 * configuration, which ignores a bad value in silence; checked here so that one stops the start, naming the
 * variable, and so that one past a timer's limit (about 24.8 days: it would fire after 1 ms, every export failing) is refused.
 */
function checkExportTimeouts(env: NodeJS.ProcessEnv): void {
  wholeNumber(env, 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT', 0, MAX_TIMED_MS);
  wholeNumber(env, 'OTEL_EXPORTER_OTLP_TIMEOUT', 0, MAX_TIMED_MS);
}

function batchOptions(env: NodeJS.ProcessEnv): BatchOptions {
  const maxQueue = wholeNumber(env, 'OTEL_BSP_MAX_QUEUE_SIZE', DEFAULT_MAX_QUEUE);
  const maxBatch = Math.min(wholeNumber(env, 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', DEFAULT_MAX_EXPORT_BATCH), maxQueue);
  return { maxQueue, maxBatch, delayMs: wholeNumber(env, 'OTEL_BSP_SCHEDULE_DELAY', 5_000, MAX_TIMED_MS) };
}

/** A request the recorder has encoded, as the export delegate's "internal representation". */
interface Encoded {
  readonly body: Uint8Array;
  readonly spans: number;
}

function exporter(config: TracingConfig, contentType: string, env: NodeJS.ProcessEnv, version: string): Export {
  const response = config.protocol === 'http/json' ? JsonTraceSerializer : ProtobufTraceSerializer;
  const serializer: ISerializer<Encoded, IExportTraceServiceResponse> = {
    serializeRequest: (e) => e.body,
    deserializeResponse: (data) => response.deserializeResponse(data),
  };
  const options = config.endpoint === null ? {} : { url: `${config.endpoint.replace(/\/+$/, '')}/v1/traces` };
  const http = convertLegacyHttpOptions(options, 'TRACES', 'v1/traces', { 'Content-Type': contentType });
  const transport = new UndiciOtlpTransport({
    url: http.url, headers: http.headers, compression: http.compression, userAgent: http.userAgent,
    tls: tlsFromEnv(env), connections: EXPORTS_IN_FLIGHT, version,
  });
  const delegate = createOtlpNetworkExportDelegate(
    http, serializer, createOtlpHttpExporterMetrics('otlp_http_span_exporter', { name: 'span', countItems: (e: Encoded) => e.spans }, http.url, undefined),
    new RetryingTransport(transport),
  );
  const base = new OTLPExporterBase<Encoded>(delegate);
  return {
    send: (body, spans) => new Promise<void>((resolve, reject) => {
      base.export({ body, spans }, (result) => (result.code === 0 ? resolve() : reject(result.error ?? new Error('export failed'))));
    }),
    shutdown: () => base.shutdown(),
  };
}

type Carrier = Record<string, string>;
const getter: TextMapGetter<Carrier> = { keys: (c) => Object.keys(c), get: (c, k) => c[k] };

/** traceparent and tracestate read by the W3C propagator; null when the traceparent is not valid. */
function traceContextReader(): TraceContextReader {
  const propagator = new W3CTraceContextPropagator();
  return (traceparent, tracestate) => {
    const carrier: Carrier = tracestate === undefined ? { traceparent } : { traceparent, tracestate };
    const c = trace.getSpanContext(propagator.extract(ROOT_CONTEXT, carrier, getter));
    if (c === undefined || !trace.isSpanContextValid(c)) return null;
    const state = c.traceState?.serialize();
    return { traceId: c.traceId, spanId: c.spanId, sampled: (c.traceFlags & 1) === 1, traceState: state ? state : null };
  };
}
