import type { CacheHit } from './cache.js';
import type { StoredResponse } from './records.js';
import { TRACE_RECORD_HEADER } from '../proxy/headers.js';

// The Redis value format and key names of the lookaside cache (docs/cache.md).
// No JSON: a small binary header, then the raw body bytes.
//
//   u8  version (1)          u8  kind (1 complete, 2 in flight)
//   u8  fingerprint length   …   fingerprint bytes
//   f64 validUntil           epoch ms on the writer's clock; older → a miss
//   complete:  u16 status, u8 flags (1 = body retained), f64 bodySize,
//              u16 header count, per header: u16 name length, name (UTF-8),
//              u32 value length, value (UTF-8); then the body to the end
//   in flight: f64 leaseUntil (epoch ms, for Retry-After)
//
// A record's trace context (StoredResponse.trace, its own column in
// PostgreSQL) is cached as one more header, the reserved last entry
// `idempotency-proxy-trace` (src/proxy/headers.ts), as records stored before
// that column keep it: never replayed, read by the replay's link.

const VERSION = 1;
const KIND_COMPLETE = 1;
const KIND_IN_FLIGHT = 2;

export function encodeComplete(fingerprint: Buffer, r: StoredResponse, validUntil: number): Buffer {
  const fpLen = fingerprint.length;
  let size = 3 + fpLen + 8 + 2 + 1 + 8 + 2;
  const n = r.headers.length;
  for (let i = 0; i < n; i++) {
    const h = r.headers[i]!;
    size += 6 + Buffer.byteLength(h[0]) + Buffer.byteLength(h[1]);
  }
  const trace = r.trace ?? null;
  if (trace !== null) size += 6 + TRACE_RECORD_HEADER.length + Buffer.byteLength(trace);
  size += r.body.length;
  const b = Buffer.allocUnsafe(size);
  b[0] = VERSION;
  b[1] = KIND_COMPLETE;
  b[2] = fpLen;
  let o = 3 + fingerprint.copy(b, 3);
  o = b.writeDoubleBE(validUntil, o);
  o = b.writeUInt16BE(r.status, o);
  o = b.writeUInt8(r.bodyRetained ? 1 : 0, o);
  o = b.writeDoubleBE(r.bodySize, o);
  o = b.writeUInt16BE(trace === null ? n : n + 1, o);
  for (let i = 0; i < n; i++) {
    const h = r.headers[i]!;
    o = writeHeader(b, o, h[0], h[1]);
  }
  if (trace !== null) o = writeHeader(b, o, TRACE_RECORD_HEADER, trace);
  r.body.copy(b, o);
  return b;
}

function writeHeader(b: Buffer, o: number, name: string, value: string): number {
  const nameLen = b.write(name, o + 2, 'utf8');
  b.writeUInt16BE(nameLen, o);
  o += 2 + nameLen;
  const valueLen = b.write(value, o + 4, 'utf8');
  b.writeUInt32BE(valueLen, o);
  return o + 4 + valueLen;
}

export function encodeInFlight(fingerprint: Buffer, validUntil: number, leaseUntil: number): Buffer {
  const b = Buffer.allocUnsafe(3 + fingerprint.length + 16);
  b[0] = VERSION;
  b[1] = KIND_IN_FLIGHT;
  b[2] = fingerprint.length;
  let o = 3 + fingerprint.copy(b, 3);
  o = b.writeDoubleBE(validUntil, o);
  b.writeDoubleBE(leaseUntil, o);
  return b;
}

/**
 * A cached value, or null when it is past its validUntil, of another format
 * version, or damaged (all of these are misses: PostgreSQL decides).
 * The body is a view into `b`, not a copy.
 */
export function decode(b: Buffer, now: number): CacheHit | null {
  try {
    if (b.length < 3 || b[0] !== VERSION) return null;
    const kind = b[1];
    const fpEnd = 3 + b[2]!;
    const fingerprint = b.subarray(3, fpEnd);
    const validUntil = b.readDoubleBE(fpEnd);
    if (!(now < validUntil)) return null;
    let o = fpEnd + 8;
    if (kind === KIND_IN_FLIGHT) {
      const leaseUntil = b.readDoubleBE(o);
      return { kind: 'in_flight', fingerprint, retryAfterS: Math.max(1, Math.ceil((leaseUntil - now) / 1000)) };
    }
    if (kind !== KIND_COMPLETE) return null;
    const status = b.readUInt16BE(o);
    const bodyRetained = b[o + 2] === 1;
    const bodySize = b.readDoubleBE(o + 3);
    const n = b.readUInt16BE(o + 11);
    o += 13;
    const headers = new Array<readonly [string, string]>(n);
    for (let i = 0; i < n; i++) {
      const nameLen = b.readUInt16BE(o);
      const name = b.toString('utf8', o + 2, o + 2 + nameLen);
      o += 2 + nameLen;
      const valueLen = b.readUInt32BE(o);
      if (o + 4 + valueLen > b.length) return null;
      const value = b.toString('utf8', o + 4, o + 4 + valueLen);
      o += 4 + valueLen;
      headers[i] = [name, value];
    }
    const body = b.subarray(o);
    return { kind: 'complete', fingerprint, response: { status, headers, body, bodyRetained, bodySize } };
  } catch {
    return null; // RangeError from a truncated value
  }
}

/**
 * The Redis key of (tenant, key): `<prefix>{<tenant>}:<key>`. The tenant is
 * the Redis Cluster hash tag, so one tenant's keys share a slot; `%`, `{` and
 * `}` in it are percent-escaped so the tag always ends where the tenant ends
 * and two different pairs never share a name. The key needs no escaping: it
 * comes after the tag and the tenant's end is unambiguous.
 */
export function cacheKey(prefix: string, tenantId: string, key: string): string {
  return `${prefix}{${escapeTag(tenantId)}}:${key}`;
}

function escapeTag(s: string): string {
  if (s.indexOf('%') === -1 && s.indexOf('{') === -1 && s.indexOf('}') === -1) return s;
  return s.replace(/[%{}]/g, (c) => (c === '%' ? '%25' : c === '{' ? '%7B' : '%7D'));
}

