import type { IncomingHttpHeaders } from 'node:http';

// Header rules in one place: what is never forwarded, and what is stored for
// replay.

/** Hop-by-hop headers (RFC 9110 §7.6.1) plus the de-facto ones. */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection',
  'te', 'trailer', 'transfer-encoding', 'upgrade',
]);

/** Per-request ids that must not be replayed as if the replay were the original. */
export const PER_REQUEST_IDS: ReadonlySet<string> = new Set([
  'x-request-id', 'request-id', 'x-correlation-id', 'traceparent', 'tracestate',
  'x-amzn-requestid', 'x-amzn-trace-id', 'x-b3-traceid', 'x-b3-spanid', 'server-timing',
]);

/**
 * The proxy's own request header to the upstream on a request that owns its
 * key (docs/co-commit.md). One a client sent is never forwarded, on any path:
 * it would let the client name another request's claim.
 */
export const CLAIM_HEADER = 'idempotency-claim';

/**
 * The reserved header holding a traced execution's traceparent, kept last in
 * its record's headers so its replays' spans link to it (docs/operations.md,
 * Tracing): where records stored before migration 8 keep it (since then it
 * has a column of its own, StoredResponse.trace), and where the Redis cache
 * keeps it (src/store/cache-codec.ts). Never replayed to a client.
 */
export const TRACE_RECORD_HEADER = 'idempotency-proxy-trace';

/**
 * The prefix of the proxy's own entries in a record's headers (the trace
 * context above, and any later one): kept after the response's headers, never
 * stored from an upstream, never replayed, never shown as response headers.
 */
export const RESERVED_HEADER_PREFIX = 'idempotency-proxy-';

export const isReservedHeader = (name: string): boolean => name.startsWith(RESERVED_HEADER_PREFIX);

type StoredHeaders = ReadonlyArray<readonly [string, string]>;

/** How many of a record's headers are the response's own: the reserved entries come last. */
export function ownHeaderCount(h: StoredHeaders): number {
  let n = h.length;
  while (n > 0 && isReservedHeader(h[n - 1]![0])) n--;
  return n;
}

/** A record's headers without the proxy's reserved entries (what keys show and the admin API list). */
export function responseHeadersOf(h: StoredHeaders): Array<[string, string]> {
  return h.filter(([name]) => !isReservedHeader(name)).map(([name, value]) => [name, value]);
}

/** The reserved entry `name` of a record's headers, or null. */
export function reservedEntry(h: StoredHeaders, name: string): string | null {
  for (let i = h.length - 1; i >= 0 && isReservedHeader(h[i]![0]); i--) if (h[i]![0] === name) return h[i]![1];
  return null;
}

/**
 * The reserved entry a reference record keeps (before the trace entry, if
 * any): the path on the upstream that its Location resolved to, which a
 * replay GETs (src/proxy/reference.ts, docs/storage.md). Never replayed.
 */
export const REFERENCE_RECORD_HEADER = 'idempotency-proxy-reference';

/** Never stored: framing headers are recomputed on replay, Date is per response. */
export const NEVER_STORED: ReadonlySet<string> = new Set(['content-length', 'date', 'set-cookie', 'idempotent-replayed']);

/**
 * The stored-header filter of a route: every end-to-end header except the
 * defaults above, plus storeHeaders, minus dropHeaders. Hop-by-hop and
 * framing headers are never stored, whatever the route says.
 */
export function compileStoredHeaders(add: readonly string[], drop: readonly string[]): (name: string) => boolean {
  const added = new Set(add);
  const dropped = new Set(drop);
  return (name) => {
    // The reserved headers are the proxy's own: an upstream's header of such a name is never stored.
    if (HOP_BY_HOP.has(name) || name === 'content-length' || isReservedHeader(name)) return false;
    if (dropped.has(name)) return false;
    if (added.has(name)) return true;
    return !NEVER_STORED.has(name) && !PER_REQUEST_IDS.has(name);
  };
}

/** W3C Trace Context: replaced when the proxy sends its own span as the upstream's parent. */
const TRACE_CONTEXT = ['traceparent', 'tracestate'] as const;

/**
 * The lengths of every header name a forwarding rule looks at (hop-by-hop,
 * X-Forwarded-*, Expect, Content-Length, Idempotency-Claim, Trace Context).
 * A name of any other length is passed on as it is, without lowercasing and
 * looking it up: most headers.
 */
const WATCHED_LENGTHS: readonly boolean[] = (() => {
  const out: boolean[] = [];
  for (const n of [...HOP_BY_HOP, 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'expect', 'content-length', CLAIM_HEADER, ...TRACE_CONTEXT]) out[n.length] = true;
  for (let i = 0; i < out.length; i++) out[i] ??= false;
  return out;
})();
const watched = (name: string): boolean => WATCHED_LENGTHS[name.length] === true;

/** Names listed in a Connection header are hop-by-hop for that message. */
function connectionTokens(value: string | string[] | undefined): Set<string> | null {
  if (value === undefined) return null;
  // The common values name no extra header: no split, no Set.
  if (typeof value === 'string' && (value.length === 10 || value.length === 5)) {
    const v = value.toLowerCase();
    if (v === 'keep-alive' || v === 'close') return null;
  }
  const s = Array.isArray(value) ? value.join(',') : value;
  const out = new Set<string>();
  for (const t of s.split(',')) {
    const n = t.trim().toLowerCase();
    if (n !== '') out.add(n);
  }
  return out.size === 0 ? null : out;
}

export interface ForwardInfo {
  readonly clientIp: string;
  readonly proto: string;
  readonly host: string | undefined;
}

/**
 * Request headers for the upstream: hop-by-hop removed, X-Forwarded-* added,
 * a client's Idempotency-Claim removed, the client's traceparent and
 * tracestate removed when the proxy sends its own (`ownTraceContext`),
 * everything else (the idempotency key included) passed on untouched.
 * rawHeaders keeps repeated lines and original case.
 */
export function upstreamRequestHeaders(raw: readonly string[], headers: IncomingHttpHeaders, info: ForwardInfo, dropBodyFraming: boolean, ownTraceContext = false): string[] {
  const conn = connectionTokens(headers.connection);
  const out: string[] = [];
  let xff: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (conn === null && !watched(name)) {
      out.push(name, raw[i + 1]!);
      continue;
    }
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || (conn !== null && conn.has(lower))) continue;
    if (lower === 'x-forwarded-for') {
      xff = xff === undefined ? raw[i + 1]! : `${xff}, ${raw[i + 1]!}`;
      continue;
    }
    if (lower === 'x-forwarded-proto' || lower === 'x-forwarded-host') continue;
    // Expect: 100-continue was answered by this proxy's listener; the body is
    // sent at once (and undici refuses the header).
    if (lower === 'expect') continue;
    if (dropBodyFraming && lower === 'content-length') continue;
    if (lower === CLAIM_HEADER) continue;
    if (ownTraceContext && (lower === 'traceparent' || lower === 'tracestate')) continue;
    out.push(name, raw[i + 1]!);
  }
  out.push('x-forwarded-for', xff === undefined ? info.clientIp : `${xff}, ${info.clientIp}`);
  out.push('x-forwarded-proto', (headers['x-forwarded-proto'] as string | undefined) ?? info.proto);
  const host = (headers['x-forwarded-host'] as string | undefined) ?? info.host;
  if (host !== undefined) out.push('x-forwarded-host', host);
  return out;
}

/**
 * Response headers for the client from the upstream's raw header lines
 * (undici hands them over as [name, value, …] buffers): hop-by-hop removed,
 * names and values as sent (Latin-1, as undici decodes them). Repeated
 * headers stay repeated.
 */
export function clientResponseHeadersRaw(raw: readonly Buffer[]): string[] {
  const out: string[] = [];
  let named: Set<string> | null = null;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toString('latin1');
    const value = raw[i + 1]!.toString('latin1');
    if (watched(name)) {
      const lower = name.toLowerCase();
      if (HOP_BY_HOP.has(lower)) {
        if (lower === 'connection') {
          const t = connectionTokens(value);
          if (t !== null) for (const n of t) (named ??= new Set()).add(n);
        }
        continue;
      }
    }
    out.push(name, value);
  }
  if (named === null) return out;
  const kept: string[] = [];
  for (let i = 0; i < out.length; i += 2) if (!named.has(out[i]!.toLowerCase())) kept.push(out[i]!, out[i + 1]!);
  return kept;
}
