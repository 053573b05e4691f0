import type { IncomingHttpHeaders } from 'node:http';
import { performance } from 'node:perf_hooks';
import { reservedEntry, TRACE_RECORD_HEADER } from '../proxy/headers.js';
import type { StoredResponse } from '../store/records.js';
import type { RequestContext } from '../lifecycle/context.js';
import { KEY_HASH_LENGTH } from '../log/logger.js';
import type { CompiledAttr, CompiledHead, CompiledKey, HeadText, SpanEncoder } from './encoder.js';
import type { IdPool } from './ids.js';
import type { Recorder } from './recorder.js';
import type { Sampler } from './sampler.js';
import { CLIENT, linkOf, ownTraceparent, SERVER, traceparentOf, TraceSpan, word, type AttributeValue, type SpanLink, type SpanRef } from './span.js';

// The request's spans (docs/operations.md, Tracing). Loaded with the rest of
// src/tracing/ only when tracing is on: with tracing off the lifecycle holds
// no RequestTracing and every span site is one null check.

/** Reads a traceparent/tracestate pair (W3C Trace Context): the propagator of @opentelemetry/core, wrapped by start.ts. */
export type TraceContextReader = (traceparent: string, tracestate: string | undefined) => SpanRef | null;

/** What every server span of one method and route shares. */
interface RouteShape {
  /** "<METHOD> <route>". */
  readonly name: string;
  readonly method: string;
  readonly route: string;
  /**
   * Its heads, compiled, by outcome, phase and status code, then by variant (ServerSpanHeads.head); null past the
   * cache's bound (compiled per span). Emptied when `path` changes: the heads with a path hold the old one.
   */
  readonly heads: Map<string, Map<string, Map<number, Array<CompiledHead | undefined>>>> | null;
  /** The path its url.path attribute is compiled for (pathAttr), null for none yet; and the last path it saw. */
  path: string | null;
  pathAttr: CompiledAttr | null;
  lastPath: string | null;
}

/** A head's variant (ServerSpanHeads.head): with the route's compiled path, and with the hashed key's attribute last. */
const WITH_PATH = 2;
const WITH_KEY = 1;

/**
 * The server span's head: its name, its kind and its attributes whose values come from small sets — method,
 * route, outcome, phase, replayed, status code —, compiled once per combination by the recorder's encoder as
 * one run of bytes; and in its variants, the route's path where the request's is the route's compiled one, and
 * the hashed key's attribute but its twelve characters (the encoder writes them after the head), where the
 * request has a key. So a replay's or a new key's server span copies one run of bytes where it copied three
 * and wrote a key-value. Under load most requests share theirs with the request before: that one is checked first.
 */
class ServerSpanHeads {
  private readonly byMethod = new Map<string, Map<string, RouteShape>>();
  private lastRoute: RouteShape | null = null;
  private last: RouteShape | null = null;
  private lastOutcome = '';
  private lastPhase = '';
  private lastStatus = -1;
  private lastVariant = -1;
  private lastHead: CompiledHead | null = null;
  private readonly keyText: HeadText;

  constructor(private readonly enc: SpanEncoder) {
    this.keyText = { key: enc.key('idempotency.key_hash'), length: KEY_HASH_LENGTH };
  }

  route(method: string, route: string): RouteShape {
    const recent = this.lastRoute;
    if (recent !== null && recent.method === method && recent.route === route) return recent;
    let byRoute = this.byMethod.get(method);
    if (byRoute === undefined) this.byMethod.set(method, (byRoute = new Map()));
    let shape = byRoute.get(route);
    if (shape === undefined) {
      const kept = byRoute.size < 1024;
      shape = { name: `${method} ${route}`, method, route, heads: kept ? new Map() : null, path: null, pathAttr: null, lastPath: null };
      if (kept) byRoute.set(route, shape);
    }
    this.lastRoute = shape;
    return shape;
  }

  /**
   * `status`: the response's status code, 0 for none; `variant`: WITH_PATH (the route's compiled path, which must
   * be the request's), WITH_KEY (the hashed key's attribute, whose characters open() is given), both or neither.
   * At most 64 status codes a route, outcome and phase are kept.
   */
  head(shape: RouteShape, outcome: string, phase: string, status: number, variant: number): CompiledHead {
    if (shape === this.last && outcome === this.lastOutcome && phase === this.lastPhase && status === this.lastStatus && variant === this.lastVariant) return this.lastHead!;
    let byPhase = shape.heads?.get(outcome);
    if (byPhase === undefined && shape.heads !== null) shape.heads.set(outcome, (byPhase = new Map()));
    let byStatus = byPhase?.get(phase);
    if (byStatus === undefined && byPhase !== undefined) byPhase.set(phase, (byStatus = new Map()));
    let variants = byStatus?.get(status);
    if (variants === undefined && byStatus !== undefined && byStatus.size < 64) byStatus.set(status, (variants = [undefined, undefined, undefined, undefined]));
    let head = variants?.[variant];
    if (head === undefined) {
      const attrs: Array<[string, AttributeValue]> = [
        ['http.request.method', shape.method],
        ['idempotency.route', shape.route],
        ['idempotency.outcome', outcome],
        ['idempotency.phase', phase],
        ['idempotency.replayed', outcome === 'replayed'],
      ];
      if (status !== 0) attrs.push(['http.response.status_code', status]);
      head = this.enc.compileHead(shape.name, SERVER, attrs, (variant & WITH_PATH) !== 0 ? shape.pathAttr : null, (variant & WITH_KEY) !== 0 ? this.keyText : null);
      if (variants !== undefined) variants[variant] = head;
    }
    this.last = shape;
    this.lastOutcome = outcome;
    this.lastPhase = phase;
    this.lastStatus = status;
    this.lastVariant = variant;
    this.lastHead = head;
    return head;
  }

  /** The route's path is now `path`, compiled as `attr`: its heads with the old one are dropped. */
  repath(shape: RouteShape, path: string, attr: CompiledAttr): void {
    shape.path = path;
    shape.pathAttr = attr;
    shape.heads?.clear();
    if (this.last === shape) this.last = null;
  }
}

/** The store round trips whose spans are written when the round trip is over (RequestTracing.storeSpan). */
export type StoreOp = 'claim' | 'commit' | 'release';

/**
 * A store round trip's span head: its name, its kind (client) and, for a claim that got an answer, the claim's
 * outcome (idempotency.claim); compiled once each by the recorder's encoder.
 */
class StoreSpanHeads {
  private readonly claim: CompiledHead;
  private readonly commit: CompiledHead;
  private readonly release: CompiledHead;
  private readonly claims = new Map<string, CompiledHead>();
  private lastKind = '';
  private lastClaim: CompiledHead | null = null;

  constructor(private readonly enc: SpanEncoder) {
    this.claim = enc.compileHead('claim', CLIENT, []);
    this.commit = enc.compileHead('commit', CLIENT, []);
    this.release = enc.compileHead('release', CLIENT, []);
  }

  /** `kind`: the claim's outcome, or null (a claim that failed, a commit, a release). At most 64 outcomes are kept. */
  head(op: StoreOp, kind: string | null): CompiledHead {
    if (kind === null) return op === 'claim' ? this.claim : op === 'commit' ? this.commit : this.release;
    if (kind === this.lastKind && this.lastClaim !== null) return this.lastClaim;
    let head = this.claims.get(kind);
    if (head === undefined) {
      head = this.enc.compileHead('claim', CLIENT, [['idempotency.claim', kind]]);
      if (this.claims.size < 64) this.claims.set(kind, head);
    }
    this.lastKind = kind;
    this.lastClaim = head;
    return head;
  }
}

/**
 * The upstream call's span head: its name (upstream), its kind (client), its method and, once an answer came, its
 * status code (http.request.method, http.response.status_code); compiled once per method and status code (at most
 * 64 of each kept), the last one checked first.
 */
class UpstreamSpanHeads {
  private readonly byMethod = new Map<string, Map<number, CompiledHead>>();
  private lastMethod = '';
  private lastStatus = -1;
  private last: CompiledHead | null = null;

  constructor(private readonly enc: SpanEncoder) {}

  /** `status`: the answer's status code, 0 for none. */
  head(method: string, status: number): CompiledHead {
    if (method === this.lastMethod && status === this.lastStatus) return this.last!;
    let byStatus = this.byMethod.get(method);
    if (byStatus === undefined) {
      byStatus = new Map();
      if (this.byMethod.size < 64) this.byMethod.set(method, byStatus);
    }
    let head = byStatus.get(status);
    if (head === undefined) {
      const attrs: Array<[string, AttributeValue]> = [['http.request.method', method]];
      if (status !== 0) attrs.push(['http.response.status_code', status]);
      head = this.enc.compileHead('upstream', CLIENT, attrs);
      if (byStatus.size < 64) byStatus.set(status, head);
    }
    this.lastMethod = method;
    this.lastStatus = status;
    this.last = head;
    return head;
  }
}

const header = (headers: IncomingHttpHeaders, name: string): string | undefined => {
  const v = headers[name];
  return Array.isArray(v) ? v.join(',') : v;
};

export class RequestTracing {
  private readonly heads: ServerSpanHeads;
  private readonly storeHeads: StoreSpanHeads;
  private readonly upstreamHeads: UpstreamSpanHeads;
  /** The server span's other attributes' names, encoded once. */
  private readonly pathKey: CompiledKey;
  private readonly sourceKey: CompiledKey;

  constructor(
    private readonly recorder: Recorder,
    private readonly sampler: Sampler,
    private readonly ids: IdPool,
    private readonly read: TraceContextReader,
  ) {
    const enc = recorder.encoder;
    this.heads = new ServerSpanHeads(enc);
    this.storeHeads = new StoreSpanHeads(enc);
    this.upstreamHeads = new UpstreamSpanHeads(enc);
    this.pathKey = enc.key('url.path');
    this.sourceKey = enc.key('error.source');
  }

  /**
   * The server span of a request, a child of the client's traceparent/tracestate when it sent a valid one.
   * Not sampled: a span with ids and no recorder (its trace context still reaches the upstream).
   */
  start(ctx: RequestContext): void {
    const ids = this.ids;
    const tp = header(ctx.req.headers, 'traceparent');
    const parent = tp === undefined ? null : this.read(tp, header(ctx.req.headers, 'tracestate'));
    let t0: number, t1: number, t2: number, t3: number, sampled: boolean;
    if (parent === null) {
      t0 = ids.word();
      t1 = ids.word();
      t2 = ids.word();
      t3 = ids.lastWord(t0 | t1 | t2);
      sampled = this.sampler.root(t0, t1, t2, t3);
    } else {
      t0 = word(parent.traceId, 0);
      t1 = word(parent.traceId, 1);
      t2 = word(parent.traceId, 2);
      t3 = word(parent.traceId, 3);
      sampled = this.sampler.parentBased ? parent.sampled : this.sampler.root(t0, t1, t2, t3);
    }
    const s0 = ids.word();
    ctx.span = new TraceSpan(
      sampled ? this.recorder : null, t0, t1, t2, t3, s0, ids.lastWord(s0),
      parent === null ? 0 : word(parent.spanId, 0), parent === null ? 0 : word(parent.spanId, 1), parent !== null,
      parent?.traceState ?? null, ctx.method, SERVER, ctx.start,
    );
  }

  /**
   * A child of the request's span, as an object while it runs: off the hot paths (a wait for the first request,
   * a reclaim, a probe, a reference route's fetch). The store round trips' spans (storeSpan) and the upstream
   * call's (upstreamStart, upstreamEnd) are written without one. An unsampled request's children are its server
   * span itself: they record nothing. `startMs`: the phase's own clock reading, when it takes one anyway.
   */
  child(ctx: RequestContext, name: string, kind: number = CLIENT, startMs: number = performance.now()): TraceSpan {
    const p = ctx.span!;
    if (!p.sampled) return p;
    const s0 = this.ids.word();
    return new TraceSpan(this.recorder, p.t0, p.t1, p.t2, p.t3, s0, this.ids.lastWord(s0), p.s0, p.s1, false, p.traceState, name, kind, startMs);
  }

  /**
   * A store round trip's span, recorded once the round trip is over (from `startMs` to `endMs`, the phase's own
   * clock readings): a child of the request's span written into the export batch at once, with no TraceSpan of
   * its own (a TraceSpan and an attribute array less to allocate, for every claim and commit). `claim`: the
   * claim's outcome (idempotency.claim), null for none; `err`: why the round trip failed (the span's status).
   */
  storeSpan(ctx: RequestContext, op: StoreOp, startMs: number, endMs: number, claim: string | null, err?: unknown): void {
    const p = ctx.span!;
    if (!p.sampled) return;
    const s0 = this.ids.word();
    this.writeChild(p, s0, this.ids.lastWord(s0), startMs, endMs, this.storeHeads.head(op, claim), err);
  }

  /** A child span of `p` written whole into the export batch (a store round trip's, the upstream call's): no TraceSpan. */
  private writeChild(p: TraceSpan, s0: number, s1: number, startMs: number, endMs: number, head: CompiledHead, err: unknown): void {
    const enc = this.recorder.openChild(p, s0, s1, startMs, endMs, head);
    if (enc === null) return;
    if (err !== undefined) enc.error((err as Error)?.message ?? String(err));
    this.recorder.close();
  }

  /**
   * The upstream call of the request's forward phase begins: its span id is drawn and kept on the request's span
   * (TraceSpan.u0, u1), and `headers` ([name, value, …]) get the traceparent naming it as the parent the upstream
   * sees (and the tracestate). Its span is written when the call ends (upstreamEnd), as a store round trip's is:
   * no TraceSpan and no attribute array of its own, kept through the upstream's answer. An unsampled request's
   * upstream sees its server span's context and records nothing.
   */
  upstreamStart(ctx: RequestContext, headers: string[]): void {
    const p = ctx.span!;
    let tp: string;
    if (p.sampled) {
      const u0 = this.ids.word();
      const u1 = this.ids.lastWord(u0);
      p.u0 = u0;
      p.u1 = u1;
      tp = traceparentOf(p, u0, u1);
    } else {
      tp = p.traceparent();
    }
    headers.push('traceparent', tp);
    if (p.traceState !== null) headers.push('tracestate', p.traceState);
  }

  /**
   * The upstream call's span, from `startMs` to `endMs` (the forward phase's own clock readings): `status`, the
   * answer's status code (0: none came); `err`, why the exchange failed (the span's status).
   */
  upstreamEnd(ctx: RequestContext, startMs: number, endMs: number, status: number, err?: unknown): void {
    const p = ctx.span!;
    if (!p.sampled) return;
    this.writeChild(p, p.u0, p.u1, startMs, endMs, this.upstreamHeads.head(ctx.method, status), err);
  }

  /**
   * The record to store: with the traceparent of this execution's span as its trace context when the execution
   * is sampled, for its replays' links; unchanged when it is not. An unsampled execution's span is never
   * exported, so a link to it would lead nowhere, and every replay reads back what its record keeps, sampled or
   * not (0.5–2 % of a replay's CPU, docs/tracing-cost.md, 2026-12-05): with a fraction of requests sampled,
   * most records keep none and most replays read none.
   */
  withTrace(ctx: RequestContext, rec: StoredResponse): StoredResponse {
    if (!ctx.span!.sampled) return rec;
    // Field by field, not a spread: in the proxy under the bench's load a spread of the record took 1.1 µs
    // against 0.44 (medians, both timed in one process). Required<>: a field added to StoredResponse must be
    // added here too.
    const traced: Required<StoredResponse> = {
      status: rec.status, headers: rec.headers, body: rec.body, bodyRetained: rec.bodyRetained, bodySize: rec.bodySize, trace: ctx.span!.traceparent(),
    };
    return traced;
  }

  /**
   * A replay's span links to the span of the execution it replays, when the record kept one: its trace
   * context (its own column since migration 8), else the reserved last header where records stored before
   * it (and the Redis cache) keep it. The value is the proxy's own, written by TraceSpan.traceparent(): one
   * exact format, read straight into words (anything else — a damaged record — goes to the W3C propagator,
   * which rejects what is invalid).
   */
  linkReplay(ctx: RequestContext, rec: StoredResponse): void {
    const span = ctx.span!;
    if (!span.sampled) return;
    // Kept as the stored text and read at the span's end (linkOfReplay): no link object made and kept meanwhile.
    span.linked = rec.trace ?? reservedEntry(rec.headers, TRACE_RECORD_HEADER);
  }

  /** The link of a replay's span, from the traceparent linkReplay() kept; null when it is not a valid one. */
  private linkOfReplay(tp: string): SpanLink | null {
    const own = ownTraceparent(tp);
    if (own !== null) return own;
    const ref = this.read(tp, undefined);
    return ref === null ? null : linkOf(ref);
  }

  /** Ends the server span with what the request's log line says: route, outcome, phase, hashed key, replayed. */
  end(ctx: RequestContext): void {
    const span = ctx.span!;
    if (!span.sampled) return;
    const route = ctx.route?.name ?? '(none)';
    const shape = this.heads.route(ctx.method, route);
    span.name = shape.name;
    const path = ctx.path;
    const compiledPath = path === shape.path;
    const keyed = ctx.key !== null;
    const head = this.heads.head(shape, ctx.outcome, ctx.phase, ctx.status, (compiledPath ? WITH_PATH : 0) | (keyed ? WITH_KEY : 0));
    // It ends when the request's metrics and log line say it did (src/lifecycle/finish.ts, which runs first).
    const enc = this.recorder.open(span, ctx.durationMs < 0 ? performance.now() : ctx.start + ctx.durationMs, head, keyed ? ctx.hashedKey() : null);
    if (enc === null) return;
    if (!compiledPath) this.writePath(enc, shape, path);
    if (ctx.source !== null) enc.attrAt(this.sourceKey, ctx.source);
    if (span.linked !== null) {
      const link = this.linkOfReplay(span.linked);
      if (link !== null) enc.link(link, 'idempotency.link', 'replay_of');
    }
    if (ctx.source !== null) enc.error(ctx.detail ?? ctx.outcome);
    this.recorder.close();
  }

  /**
   * The server span's url.path, where it is not the route's compiled one. Most routes name one exact path, so a
   * route's requests mostly repeat one: its attribute is compiled once, into the route's heads (a path written
   * as text costs some 40 instructions a character; docs/tracing-cost.md, 2026-12-05, late morning). A route
   * whose paths vary (ids in them) has them written as text; a path seen on two requests of the route in a row
   * becomes its compiled one.
   */
  private writePath(enc: SpanEncoder, shape: RouteShape, path: string): void {
    enc.attrAt(this.pathKey, path);
    if (path === shape.lastPath) this.heads.repath(shape, path, enc.compileAttr(this.pathKey, path));
    shape.lastPath = path;
  }
}

/** Ends a child span; a failure marks it. `endMs`: the phase's own clock reading, when it takes one anyway. */
export function endChild(span: TraceSpan, err?: unknown, endMs?: number): void {
  if (err !== undefined) span.fail((err as Error)?.message ?? String(err));
  span.end(endMs);
}
