import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler } from '@opentelemetry/sdk-trace-base';
import type { TracingConfig } from '../config/types.js';
import { RequestTracing } from './spans.js';

// The OpenTelemetry SDK, loaded by src/app.ts with a dynamic import only when
// tracing is on (docs/operations.md, Tracing): a tracer provider of its own
// (nothing registered globally), a batch processor, the OTLP/HTTP exporter.
// What the YAML section leaves out, the SDK reads from the standard OTEL_*
// variables (endpoint, headers, sampler, resource attributes).

export interface StartedTracing {
  readonly tracing: RequestTracing;
  /** Exports what is buffered, then stops. */
  shutdown(): Promise<void>;
}

export function startTracing(config: TracingConfig): StartedTracing {
  const env = detectResources({ detectors: [envDetector] });
  const service = config.serviceName ?? process.env.OTEL_SERVICE_NAME ?? 'idempotency-proxy';
  const resource = env.merge(resourceFromAttributes({ 'service.name': service }));
  const exporter = new OTLPTraceExporter(config.endpoint === null ? {} : { url: `${config.endpoint.replace(/\/+$/, '')}/v1/traces` });
  const provider = new BasicTracerProvider({
    resource,
    spanProcessors: [new BatchSpanProcessor(exporter)],
    ...(config.sampleRatio === null ? {} : { sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(config.sampleRatio) }) }),
  });
  return {
    tracing: new RequestTracing(provider.getTracer('idempotency-proxy'), new W3CTraceContextPropagator()),
    shutdown: () => provider.shutdown(),
  };
}
