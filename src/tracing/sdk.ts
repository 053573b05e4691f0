import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { TracingConfig } from '../config/types.js';
import { RequestTracing } from './spans.js';

// The OpenTelemetry SDK, loaded by src/app.ts with a dynamic import only when
// tracing is on (docs/operations.md, Tracing): a tracer provider of its own
// (nothing registered globally, no context manager: the lifecycle passes each
// span's parent explicitly), a batch processor, the OTLP/HTTP exporter in the
// encoding asked for (protobuf unless http/json is; only that one is loaded).
// What the YAML section leaves out, the SDK reads from the standard OTEL_*
// variables (endpoint, headers, sampler, batch processor, resource attributes).

export interface StartedTracing {
  readonly tracing: RequestTracing;
  /** Exports what is buffered, then stops. */
  shutdown(): Promise<void>;
}

export async function startTracing(config: TracingConfig): Promise<StartedTracing> {
  const env = detectResources({ detectors: [envDetector] });
  const service = config.serviceName ?? process.env.OTEL_SERVICE_NAME ?? 'idempotency-proxy';
  const resource = env.merge(resourceFromAttributes({ 'service.name': service }));
  const provider = new BasicTracerProvider({
    resource,
    spanProcessors: [new BatchSpanProcessor(await exporter(config), batchOptions(process.env))],
    ...(config.sampleRatio === null ? {} : { sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(config.sampleRatio) }) }),
  });
  return {
    tracing: new RequestTracing(provider.getTracer('idempotency-proxy'), new W3CTraceContextPropagator()),
    shutdown: () => provider.shutdown(),
  };
}

/**
 * The batch processor's queue: 16 384 spans unless OTEL_BSP_MAX_QUEUE_SIZE
 * says otherwise (the SDK's 2 048 is a tenth of a second of spans at 5 000
 * requests a second, so one slow export would drop spans). Batches stay at
 * the SDK's 512 (OTEL_BSP_MAX_EXPORT_BATCH_SIZE): exported as soon as they
 * fill, spans die young, where large batches held for long keep them alive
 * past the young generation (docs/operations.md, Tracing: cost).
 */
function batchOptions(env: NodeJS.ProcessEnv): { maxQueueSize?: number } {
  return env.OTEL_BSP_MAX_QUEUE_SIZE === undefined || env.OTEL_BSP_MAX_QUEUE_SIZE === '' ? { maxQueueSize: 16_384 } : {};
}

async function exporter(config: TracingConfig): Promise<SpanExporter> {
  const options = config.endpoint === null ? {} : { url: `${config.endpoint.replace(/\/+$/, '')}/v1/traces` };
  if (config.protocol === 'http/json') {
    const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http');
    return new OTLPTraceExporter(options);
  }
  const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-proto');
  return new OTLPTraceExporter(options);
}
