import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { FingerprintPolicy } from '../config/types.js';
import { canonicalJson, jsonDepthAtMost, numbersArePrecise, parsePointer, type JsonValue } from './json.js';

/** Deeper JSON bodies are fingerprinted byte for byte, never canonicalized. */
export const MAX_CANONICAL_DEPTH = 512;

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

function part(s: string): string {
  return `${Buffer.byteLength(s)}:${s}`;
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
  // The parts are joined into one string and hashed in two updates (the
  // bytes are the same as part by part: fingerprints stored by earlier
  // versions still match).
  let head = part(method) + part(path) + part(fp.query ? query : '');
  for (const name of fp.headers) {
    const v = headers[name];
    head += part(name) + part(v === undefined ? '' : Array.isArray(v) ? v.join('\n') : v);
  }
  // A body whose numbers a double cannot hold exactly is hashed raw: its
  // canonical form could equal another payload's. So is a body nested deeper
  // than MAX_CANONICAL_DEPTH (canonicalizing it would exhaust the stack).
  if (fp.canonical && json !== undefined && numbersArePrecise(body) && jsonDepthAtMost(body, MAX_CANONICAL_DEPTH)) {
    return createHash('sha256').update(head + 'j' + part(canonicalJson(json, fp.exclude))).digest();
  }
  return createHash('sha256').update(`${head}r${body.length}:`).update(body).digest();
}
