import type { IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import type { TenantSource } from '../config/types.js';
import type { StoredResponse } from '../store/records.js';
import { REFERENCE_RECORD_HEADER, TRACE_RECORD_HEADER } from './headers.js';
import { classify, type Upstream, type UpstreamError } from './upstream.js';

// Reference records (`record: reference`, docs/storage.md, Record kinds): a
// 2xx answer with a Location on the upstream's own origin is stored as its
// status and headers, with the Location's path in a reserved last entry and
// no body; a replay GETs that path from the upstream and answers the original
// status with the current body. What the commit stores and what the replay
// fetches are here; src/lifecycle/reference.ts answers the replay.

const EMPTY = Buffer.alloc(0);

/** The three kinds of complete record (docs/storage.md): the body stored, too large to store, or fetched on replay. */
export type RecordKind = 'full' | 'marker' | 'reference';

/** The path (and query) a reference record GETs, or null: the record is not a reference. */
export function referenceOf(h: ReadonlyArray<readonly [string, string]>): string | null {
  let n = h.length;
  if (n > 0 && h[n - 1]![0] === TRACE_RECORD_HEADER) n--;
  return n > 0 && h[n - 1]![0] === REFERENCE_RECORD_HEADER ? h[n - 1]![1] : null;
}

/** A complete record's kind (null: no response stored yet). */
export function recordKind(bodyRetained: boolean | null, headers: ReadonlyArray<readonly [string, string]> | null): RecordKind | null {
  if (bodyRetained === null) return null;
  if (bodyRetained) return 'full';
  return headers !== null && referenceOf(headers) !== null ? 'reference' : 'marker';
}

/** The stored headers without the reference entry (for operators: the kind and the path are shown on their own). */
export function withoutReference(h: ReadonlyArray<readonly [string, string]>): ReadonlyArray<readonly [string, string]> {
  return h.some(([n]) => n === REFERENCE_RECORD_HEADER) ? h.filter(([n]) => n !== REFERENCE_RECORD_HEADER) : h;
}

/**
 * The path on the upstream that `location` names, resolved against the
 * request's URL on the upstream; null when it names another origin (never
 * followed: the proxy only ever asks its own upstream) or is not a URL.
 */
export function resolveReference(location: string, requestPath: string, origin: string): string | null {
  let url: URL;
  try {
    url = new URL(location, origin + requestPath);
  } catch {
    return null;
  }
  return url.origin === origin ? url.pathname + url.search : null;
}

/**
 * The record of `rec` on a `record: reference` route: a reference when the
 * answer is a success with a body to show (2xx other than 204 and 205) and a
 * Location on the upstream's origin; otherwise `rec` itself, stored in full
 * (errors, redirects, no Location, another origin).
 */
export function asReference(rec: StoredResponse, requestPath: string, origin: string): StoredResponse {
  const s = rec.status;
  if (s < 200 || s > 299 || s === 204 || s === 205) return rec;
  const location = rec.headers.find(([n]) => n === 'location');
  if (location === undefined) return rec;
  const ref = resolveReference(location[1], requestPath, origin);
  if (ref === null) return rec;
  return { status: s, headers: [...rec.headers, [REFERENCE_RECORD_HEADER, ref]], body: EMPTY, bodyRetained: false, bodySize: rec.bodySize };
}

/** The request header the route's tenant comes from (the credential the GET carries), or null. */
export function credentialHeader(tenant: TenantSource): string | null {
  return tenant.kind === 'fromHeader' || tenant.kind === 'fromHeaderHash' ? tenant.header : null;
}

/** What GET <reference> returned: a 2xx with its body to stream, another status (its body discarded), or a failed exchange. */
export type Fetched =
  | { readonly kind: 'ok'; readonly headers: IncomingHttpHeaders; readonly body: Readable }
  | { readonly kind: 'status'; readonly status: number }
  | { readonly kind: 'failed'; readonly error: UpstreamError };

/**
 * GET `path` from the upstream with the duplicate's credential header (the
 * one its tenant came from: same tenant, same value), its Accept, and the
 * replay's request id. upstream.timeout bounds the headers and each pause in
 * the body (the pool's timeouts). Redirects are not followed.
 */
export async function fetchReference(upstream: Upstream, path: string, req: IncomingHttpHeaders, credential: string | null, requestId: string): Promise<Fetched> {
  const headers: string[] = ['x-request-id', requestId];
  const cred = credential === null ? undefined : req[credential];
  if (typeof cred === 'string') headers.push(credential!, cred);
  const accept = req.accept;
  if (accept !== undefined) headers.push('accept', accept);
  try {
    const r = await upstream.pool.request({ origin: upstream.origin, path, method: 'GET', headers });
    if (r.statusCode >= 200 && r.statusCode <= 299) return { kind: 'ok', headers: r.headers as IncomingHttpHeaders, body: r.body };
    await r.body.dump().catch(() => {});
    return { kind: 'status', status: r.statusCode };
  } catch (err) {
    return { kind: 'failed', error: classify(err) };
  }
}
