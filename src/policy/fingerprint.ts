import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { FingerprintPolicy } from '../config/types.js';
import { canonicalJson, parsePointer, type JsonValue } from './json.js';

// SHA-256 over method, path, query, selected headers and the body. Every part
// is length-prefixed, so no two different requests share an input.

export interface CompiledFingerprint {
  readonly headers: readonly string[];
  readonly query: boolean;
  readonly canonical: boolean;
  readonly exclude: readonly (readonly string[])[];
}

export function compileFingerprint(p: FingerprintPolicy): CompiledFingerprint {
  return {
    headers: p.headers,
    query: p.query,
    canonical: p.json === 'canonical',
    exclude: p.exclude.map(parsePointer),
  };
}

function part(h: ReturnType<typeof createHash>, s: string): void {
  h.update(`${Buffer.byteLength(s)}:`);
  h.update(s);
}

export function fingerprint(
  fp: CompiledFingerprint,
  method: string,
  path: string,
  query: string,
  headers: IncomingHttpHeaders,
  body: Buffer,
  json: JsonValue | undefined,
): Buffer {
  const h = createHash('sha256');
  part(h, method);
  part(h, path);
  part(h, fp.query ? query : '');
  for (const name of fp.headers) {
    const v = headers[name];
    part(h, name);
    part(h, v === undefined ? '' : Array.isArray(v) ? v.join('\n') : v);
  }
  if (fp.canonical && json !== undefined) {
    h.update('j');
    part(h, canonicalJson(json, fp.exclude));
  } else {
    h.update(`r${body.length}:`);
    h.update(body);
  }
  return h.digest();
}
