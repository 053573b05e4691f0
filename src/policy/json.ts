// JSON helpers for body keys and canonical fingerprints: RFC 6901 pointers
// and a canonical serialization (sorted keys, no whitespace).

export type JsonValue = null | boolean | number | string | JsonValue[] | { [k: string]: JsonValue };

export function parsePointer(pointer: string): string[] {
  if (pointer === '') return [];
  return pointer.slice(1).split('/').map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

export function resolvePointer(doc: JsonValue, pointer: string | readonly string[]): JsonValue | undefined {
  const tokens = typeof pointer === 'string' ? parsePointer(pointer) : pointer;
  let cur: JsonValue | undefined = doc;
  for (const t of tokens) {
    if (cur === null || typeof cur !== 'object') return undefined;
    if (Array.isArray(cur)) {
      if (!/^(0|[1-9][0-9]*)$/.test(t)) return undefined;
      cur = cur[Number(t)];
    } else {
      if (!Object.prototype.hasOwnProperty.call(cur, t)) return undefined;
      cur = cur[t];
    }
  }
  return cur;
}

/** Parses a JSON body; undefined when it is not JSON. */
export function parseJsonBody(body: Buffer): JsonValue | undefined {
  if (body.length === 0) return undefined;
  try {
    return JSON.parse(body.toString('utf8')) as JsonValue;
  } catch {
    return undefined;
  }
}

/**
 * Canonical JSON: object keys sorted, no whitespace, excluded pointers
 * removed. Two documents equal up to key order and whitespace serialize the same.
 */
export function canonicalJson(doc: JsonValue, exclude: readonly (readonly string[])[]): string {
  return write(doc, exclude.length > 0 ? exclude : null, 0);
}

function write(v: JsonValue, exclude: readonly (readonly string[])[] | null, depth: number): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) {
    let s = '[';
    for (let i = 0; i < v.length; i++) {
      if (i > 0) s += ',';
      s += write(v[i]!, narrow(exclude, depth, String(i)), depth + 1);
    }
    return s + ']';
  }
  const keys = Object.keys(v).sort();
  let s = '{';
  let first = true;
  for (const k of keys) {
    const sub = narrow(exclude, depth, k);
    if (sub !== null && sub.some((p) => p.length === depth + 1)) continue; // excluded
    if (!first) s += ',';
    first = false;
    s += JSON.stringify(k) + ':' + write(v[k]!, sub, depth + 1);
  }
  return s + '}';
}

/** The exclusion pointers that continue below token `t` at this depth. */
function narrow(exclude: readonly (readonly string[])[] | null, depth: number, t: string): readonly (readonly string[])[] | null {
  if (exclude === null) return null;
  let out: (readonly string[])[] | null = null;
  for (const p of exclude) {
    if (p[depth] === t) (out ??= []).push(p);
  }
  return out;
}
