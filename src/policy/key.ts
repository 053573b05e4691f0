import type { IncomingHttpHeaders } from 'node:http';
import type { KeySource } from '../config/types.js';
import { resolvePointer, type JsonValue } from './json.js';

// Key extraction and validation (docs/contract.md, step 2). Expected failures are values.

export const MAX_KEY_LENGTH = 255;

export type KeyProblemKind = 'key-malformed' | 'key-body-not-json' | 'key-pointer-missing';

export interface KeyProblem {
  readonly problem: KeyProblemKind;
  readonly detail: string;
}

/** string: the key; null: no key sent; KeyProblem: a key that must be rejected with 400. */
export type KeyResult = string | null | KeyProblem;

export function isKeyProblem(r: KeyResult): r is KeyProblem {
  return r !== null && typeof r === 'object';
}

function malformed(detail: string): KeyProblem {
  return { problem: 'key-malformed', detail };
}

/** Visible ASCII only (0x21–0x7E). */
function checkChars(key: string, what: string): KeyProblem | null {
  if (key.length === 0) return malformed(`${what} is empty`);
  if (key.length > MAX_KEY_LENGTH) return malformed(`${what} is ${key.length} characters long; at most ${MAX_KEY_LENGTH} are allowed`);
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) {
      return malformed(`${what} contains a character outside visible ASCII (code ${c}) at position ${i}`);
    }
  }
  return null;
}

/**
 * The header value in bare form (`abc`, what Stripe clients send) or as a
 * Structured Field string (`"abc"`, the IETF draft); both mean the same key.
 */
export function parseKeyHeaderValue(value: string, header: string): string | KeyProblem {
  let key = value;
  if (value.length > 0 && value.charCodeAt(0) === 0x22 /* " */) {
    if (value.length < 2 || value.charCodeAt(value.length - 1) !== 0x22) {
      return malformed(`${header} starts a quoted string but does not end it`);
    }
    let out = '';
    for (let i = 1; i < value.length - 1; i++) {
      const ch = value[i]!;
      if (ch === '\\') {
        const next = value[i + 1];
        if (next !== '"' && next !== '\\' || i + 1 >= value.length - 1) {
          return malformed(`${header} has an invalid escape in its quoted string`);
        }
        out += next;
        i++;
      } else if (ch === '"') {
        return malformed(`${header} has an unescaped quote inside its quoted string`);
      } else {
        out += ch;
      }
    }
    key = out;
  }
  return checkChars(key, header) ?? key;
}

/** Counts the header's lines in rawHeaders (Node joins repeated lines with ", "). */
function headerLines(rawHeaders: readonly string[], name: string): number {
  let n = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.length === name.length && rawHeaders[i]!.toLowerCase() === name) n++;
  }
  return n;
}

export function keyFromHeader(headers: IncomingHttpHeaders, rawHeaders: readonly string[], header: string): KeyResult {
  const value = headers[header];
  if (value === undefined) return null;
  if (typeof value !== 'string') return malformed(`${header} was sent more than once`);
  // Node joins repeated lines of most headers with ", ": count them only then.
  if (value.includes(',') && headerLines(rawHeaders, header) > 1) {
    return malformed(`${header} was sent on more than one header line`);
  }
  return parseKeyHeaderValue(value, header);
}

/** A key taken from a JSON body field (a payment provider's event id). */
export function keyFromBody(json: JsonValue | undefined, pointer: string, tokens: readonly string[]): KeyResult {
  if (json === undefined) {
    return { problem: 'key-body-not-json', detail: `this route takes its key from the JSON body at ${pointer}, but the body is not valid JSON` };
  }
  const v = resolvePointer(json, tokens);
  if (v === undefined || v === null) {
    return { problem: 'key-pointer-missing', detail: `the JSON body has no value at ${pointer}, where this route takes its key from` };
  }
  let key: string;
  if (typeof v === 'string') key = v;
  else if (typeof v === 'number' && Number.isSafeInteger(v)) key = String(v);
  else return malformed(`the value at ${pointer} must be a string or an integer to serve as the key`);
  return checkChars(key, `the key at ${pointer}`) ?? key;
}
