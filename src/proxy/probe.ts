import type { IncomingMessage } from 'node:http';
import type { RoutePolicy } from '../config/types.js';
import type { StoredResponse } from '../store/records.js';
import { classify, type Upstream } from './upstream.js';

// The outcome probe (onExpiredLease: probe, docs/guarantees.md): after a
// crashed holder's lease ran out, the upstream is asked whether the operation
// ran, by a request of the route's outcomeProbe with the URL-encoded key in
// its path, the client's credential and the key header. Compiled once per
// route at start-up; sent over the same undici pool as every forward.
//   found  — a 2xx: the operation ran; its answer (status, stored headers,
//            body within maxStoredResponseBytes) is the record;
//   absent — a 404: it did not run;
//   failed — any other status, a timeout, no connection: nobody knows.

export interface CompiledProbe {
  readonly method: 'GET' | 'HEAD';
  /** The probe's origin-form target for one key. */
  path(key: string): string;
  /** Request headers copied from the client's request when present (lower-case names). */
  readonly copied: readonly string[];
  /** A key read from the body is sent in this header (null: the client's own key header is copied). */
  readonly keyHeader: string | null;
}

export type ProbeResult =
  | { readonly kind: 'found'; readonly response: StoredResponse; readonly buffered: number }
  | { readonly kind: 'absent' }
  | { readonly kind: 'failed'; readonly reason: string };

export interface ProbeOptions {
  readonly requestId: string;
  /** maxStoredResponseBytes: body bytes kept for the record. */
  readonly limit: number;
  /** upstream.timeout: the whole probe exchange. */
  readonly timeoutMs: number;
  /** The route's stored-header filter. */
  readonly storeHeader: (name: string) => boolean;
  /** Where the kept body is counted (limits.maxBufferedBytes); the caller gives back `buffered`. */
  readonly budget: { take(n: number): void; give(n: number): void };
}

/** The route's probe, or null when it does not probe. */
export function compileProbe(policy: RoutePolicy): CompiledProbe | null {
  if (policy.onExpiredLease !== 'probe' || policy.outcomeProbe === null) return null;
  const parts = policy.outcomeProbe.path.split('{key}');
  const copied = new Set<string>(['host', 'authorization']);
  const tenant = policy.tenant;
  if (tenant.kind === 'fromHeader' || tenant.kind === 'fromHeaderHash') copied.add(tenant.header);
  const key = policy.key;
  if (key.kind !== 'fromBody') copied.add(key.header);
  return {
    method: policy.outcomeProbe.method,
    path: parts.length === 1 ? () => parts[0]! : (k) => parts.join(encodeURIComponent(k)),
    copied: [...copied],
    keyHeader: key.kind === 'fromBody' ? 'idempotency-key' : null,
  };
}

function probeHeaders(probe: CompiledProbe, req: IncomingMessage, key: string, requestId: string): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const name of probe.copied) {
    const v = req.headers[name];
    if (v !== undefined) out[name] = v;
  }
  if (probe.keyHeader !== null) out[probe.keyHeader] = key;
  out['x-request-id'] = requestId;
  return out;
}

function storedHeaders(headers: Record<string, string | string[] | undefined>, keep: (name: string) => boolean): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const name of Object.keys(headers)) {
    const v = headers[name];
    if (v === undefined) continue;
    const lower = name.toLowerCase();
    if (!keep(lower)) continue;
    if (Array.isArray(v)) for (const one of v) out.push([lower, one]);
    else out.push([lower, v]);
  }
  return out;
}

/** Sends the probe for `key`; never throws: every failure is a `failed` result. */
export async function sendProbe(upstream: Upstream, probe: CompiledProbe, req: IncomingMessage, key: string, opts: ProbeOptions): Promise<ProbeResult> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), opts.timeoutMs);
  let buffered = 0;
  try {
    const r = await upstream.pool.request({
      origin: upstream.origin,
      path: probe.path(key),
      method: probe.method,
      headers: probeHeaders(probe, req, key, opts.requestId),
      signal: abort.signal,
      headersTimeout: opts.timeoutMs,
      bodyTimeout: opts.timeoutMs,
    });
    const status = r.statusCode;
    if (status === 404) {
      await r.body.dump();
      return { kind: 'absent' };
    }
    if (status < 200 || status > 299) {
      await r.body.dump();
      return { kind: 'failed', reason: `the outcome probe answered ${status}` };
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of r.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size <= opts.limit) {
        chunks.push(chunk);
        opts.budget.take(chunk.length);
        buffered += chunk.length;
      }
    }
    const retained = size <= opts.limit;
    const response: StoredResponse = {
      status,
      headers: storedHeaders(r.headers, opts.storeHeader),
      body: retained ? Buffer.concat(chunks, size) : Buffer.alloc(0),
      bodyRetained: retained,
      bodySize: size,
    };
    return { kind: 'found', response, buffered };
  } catch (err) {
    // A found probe's bytes are given back by the caller, a failed one's here.
    if (buffered > 0) opts.budget.give(buffered);
    if (abort.signal.aborted) return { kind: 'failed', reason: `the outcome probe got no answer within upstream.timeout (${opts.timeoutMs} ms)` };
    return { kind: 'failed', reason: `the outcome probe failed: ${classify(err).message}` };
  } finally {
    clearTimeout(timer);
  }
}
