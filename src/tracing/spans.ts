import type { IncomingHttpHeaders } from 'node:http';
import {
  ROOT_CONTEXT, SpanKind, SpanStatusCode, trace,
  type Context, type Span, type SpanContext, type SpanOptions, type TextMapGetter, type TextMapPropagator, type Tracer,
} from '@opentelemetry/api';
import { reservedEntry, TRACE_RECORD_HEADER } from '../proxy/headers.js';
import type { StoredResponse } from '../store/records.js';
import type { RequestContext } from '../lifecycle/context.js';

// The request's spans (docs/operations.md, Tracing). Only @opentelemetry/api
// is imported here; the SDK behind `tracer` is loaded by src/tracing/sdk.ts,
// and only when tracing is on. With tracing off the lifecycle holds no
// RequestTracing and every span site is one null check.


const headerGetter: TextMapGetter<IncomingHttpHeaders> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => carrier[key],
};

type Carrier = Record<string, string>;
const carrierGetter: TextMapGetter<Carrier> = { keys: (c) => Object.keys(c), get: (c, k) => c[k] };

const SERVER: SpanOptions = { kind: SpanKind.SERVER };
const CLIENT: SpanOptions = { kind: SpanKind.CLIENT };

/** `00-<trace id>-<span id>-<flags>`, as the W3C propagator writes it. */
function traceparent(c: SpanContext): string {
  return `00-${c.traceId}-${c.spanId}-0${c.traceFlags & 1}`;
}

/** "<METHOD> <route>" span names, built once per pair. */
class SpanNames {
  private readonly names = new Map<string, Map<string, string>>();
  get(method: string, route: string): string {
    let byRoute = this.names.get(method);
    if (byRoute === undefined) this.names.set(method, (byRoute = new Map()));
    let name = byRoute.get(route);
    if (name === undefined) {
      name = `${method} ${route}`;
      if (byRoute.size < 1024) byRoute.set(route, name);
    }
    return name;
  }
}

export class RequestTracing {
  private readonly names = new SpanNames();

  constructor(private readonly tracer: Tracer, private readonly propagator: TextMapPropagator) {}

  /**
   * The server span of a request, a child of the client's traceparent/tracestate when it sent them.
   * Without a traceparent there is nothing to extract: the root context is the parent.
   */
  start(ctx: RequestContext): void {
    const parent = ctx.req.headers.traceparent === undefined ? ROOT_CONTEXT : this.propagator.extract(ROOT_CONTEXT, ctx.req.headers, headerGetter);
    // No attributes at the start (each set there is sanitised and copied twice by the SDK): end() sets them all.
    const span = this.tracer.startSpan(ctx.method, SERVER, parent);
    ctx.span = span;
    ctx.spanContext = trace.setSpan(parent, span);
  }

  /** A child of the request's span: a store round trip (claim, commit, release) or the upstream call. */
  child(ctx: RequestContext, name: string, kind: SpanKind = SpanKind.CLIENT): Span {
    return this.tracer.startSpan(name, kind === SpanKind.CLIENT ? CLIENT : { kind }, ctx.spanContext as Context);
  }

  /**
   * traceparent (and tracestate) naming `span` as the parent: [name, value, …].
   * Written from the span's context directly (what the W3C propagator's
   * inject writes, without a context and a carrier per request).
   */
  headers(span: Span): string[] {
    const c = span.spanContext();
    const out = ['traceparent', traceparent(c)];
    const state = c.traceState?.serialize();
    if (state) out.push('tracestate', state);
    return out;
  }

  /** The record to store, with the traceparent of this execution's span as a reserved last header. */
  withTrace(ctx: RequestContext, rec: StoredResponse): StoredResponse {
    return { ...rec, headers: [...rec.headers, [TRACE_RECORD_HEADER, traceparent(ctx.span!.spanContext())]] };
  }

  /** A replay's span links to the span of the execution it replays, when the record kept one. */
  linkReplay(ctx: RequestContext, rec: StoredResponse): void {
    const original = storedTraceContext(this.propagator, rec);
    if (original !== null) ctx.span!.addLink({ context: original, attributes: { 'idempotency.link': 'replay_of' } });
  }

  /** Ends the server span with what the request's log line says: route, outcome, phase, hashed key, replayed. */
  end(ctx: RequestContext): void {
    const span = ctx.span!;
    if (!span.isRecording()) {
      span.end(); // not sampled: nothing to describe
      return;
    }
    const route = ctx.route?.name ?? '(none)';
    span.updateName(this.names.get(ctx.method, route));
    span.setAttribute('http.request.method', ctx.method);
    span.setAttribute('url.path', ctx.path);
    span.setAttribute('idempotency.route', route);
    span.setAttribute('idempotency.outcome', ctx.outcome);
    span.setAttribute('idempotency.phase', ctx.phase);
    span.setAttribute('idempotency.replayed', ctx.outcome === 'replayed');
    if (ctx.key !== null) span.setAttribute('idempotency.key_hash', ctx.hashedKey());
    if (ctx.status !== 0) span.setAttribute('http.response.status_code', ctx.status);
    if (ctx.source !== null) {
      span.setAttribute('error.source', ctx.source);
      span.setStatus({ code: SpanStatusCode.ERROR, message: ctx.detail ?? ctx.outcome });
    }
    span.end();
  }
}

/** Ends a child span; a failure marks it. */
export function endChild(span: Span, err?: unknown): void {
  if (err !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message ?? String(err) });
  span.end();
}

function storedTraceContext(propagator: TextMapPropagator, rec: StoredResponse): SpanContext | null {
  const tp = reservedEntry(rec.headers, TRACE_RECORD_HEADER);
  if (tp === null) return null;
  const c = trace.getSpanContext(propagator.extract(ROOT_CONTEXT, { traceparent: tp }, carrierGetter));
  return c !== undefined && trace.isSpanContextValid(c) ? c : null;
}
