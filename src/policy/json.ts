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
 * True when every number in a (valid) JSON body survives parsing exactly, so
 * two bodies whose numbers differ never share a canonical form. A number with
 * more than 15 significant digits that is not a safe integer, or one outside
 * the normal double range (1e400, 1e-400), may collapse into another value:
 * such a body must be hashed raw. Scans bytes; strings are skipped.
 */
export function numbersArePrecise(body: Buffer): boolean {
  const n = body.length;
  let i = 0;
  while (i < n) {
    const c = body[i]!;
    if (c === 0x22 /* " */) {
      i++;
      while (i < n) {
        const d = body[i]!;
        if (d === 0x5c /* \ */) i += 2;
        else {
          i++;
          if (d === 0x22) break;
        }
      }
      continue;
    }
    if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
      const start = i++;
      while (i < n) {
        const d = body[i]!;
        if ((d >= 0x30 && d <= 0x39) || d === 0x2e || d === 0x65 || d === 0x45 || d === 0x2b || d === 0x2d) i++;
        else break;
      }
      if (!numberIsPrecise(body, start, i)) return false;
      continue;
    }
    i++;
  }
  return true;
}

function numberIsPrecise(body: Buffer, start: number, end: number): boolean {
  let digits = 0; // significant digits so far, counting inner zeros
  let zeros = 0; // zeros seen since the last non-zero digit
  let integer = true;
  for (let i = start; i < end; i++) {
    const d = body[i]!;
    if (d >= 0x31 && d <= 0x39) {
      digits += zeros + 1;
      zeros = 0;
    } else if (d === 0x30) {
      if (digits > 0) zeros++;
    } else if (d === 0x2e) integer = false;
    else if (d === 0x65 || d === 0x45) {
      integer = false;
      break;
    }
  }
  if (digits === 0) return true; // a zero
  const value = Number(body.toString('latin1', start, end));
  if (integer && Number.isSafeInteger(value)) return true;
  if (digits > 15) return false;
  const abs = Math.abs(value);
  return abs >= 2.2250738585072014e-308 && abs <= Number.MAX_VALUE;
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

/**
 * True when a (valid) JSON body nests arrays and objects at most `max` deep.
 * canonicalJson recurses once per level: a hostile body nested a hundred
 * thousand deep would exhaust the stack. Scans bytes; strings are skipped.
 */
export function jsonDepthAtMost(body: Buffer, max: number): boolean {
  let depth = 0;
  const n = body.length;
  for (let i = 0; i < n; i++) {
    const c = body[i]!;
    if (c === 0x22 /* " */) {
      for (i++; i < n && body[i] !== 0x22; i++) if (body[i] === 0x5c /* \ */) i++;
    } else if (c === 0x5b /* [ */ || c === 0x7b /* { */) {
      if (++depth > max) return false;
    } else if (c === 0x5d /* ] */ || c === 0x7d /* } */) {
      depth--;
    }
  }
  return true;
}
