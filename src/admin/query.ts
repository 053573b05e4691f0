import { hash } from 'node:crypto';
import { parseDuration } from '../config/units.js';

// The listing's filters and its cursor, read from strings (the admin API's
// query string and the CLI's flags alike) and checked once, at the edge. A
// bad value is an AdminInputError naming the field; each front door words it
// in its own terms (a problem's invalid-params, a CLI flag).

export const KEY_STATES = ['in_flight', 'complete', 'outcome_unknown'] as const;
export type KeyState = (typeof KEY_STATES)[number];

export const MAX_PAGE = 1000;
export const MAX_PAGE_WITH_BODY = 100;
export const DEFAULT_PAGE = 100;

/** The listing's fields, as the admin API names them (docs/operations.md). */
export type ListField = 'state' | 'route' | 'tenantId' | 'olderThan' | 'limit' | 'cursor' | 'body';
export const LIST_FIELDS: readonly ListField[] = ['state', 'route', 'tenantId', 'olderThan', 'limit', 'cursor', 'body'];

export class AdminInputError extends Error {
  readonly code = 'IDEMP_ADMIN_INPUT';
  constructor(readonly field: string, readonly reason: string, readonly status = 400) {
    super(`${field}: ${reason}`);
    this.name = 'AdminInputError';
  }
}

export interface Cursor {
  readonly tenantId: string;
  readonly key: string;
}

export interface ListQuery {
  readonly state: KeyState | null;
  readonly route: string | null;
  readonly tenantId: string | null;
  readonly olderThanMs: number | null;
  readonly limit: number;
  readonly withBody: boolean;
  readonly cursor: Cursor | null;
  /** Binds a cursor to the filters it was made for. */
  readonly filterTag: string;
}

export type ListParams = Partial<Record<ListField, string>>;

const TEXT_MAX = 255;

/**
 * A tenant id, key or route name as given (a filter, a path segment, a cursor): PostgreSQL's text cannot hold
 * U+0000, so no stored one has it, and sent in a statement it would fail as an SQL error, not match nothing.
 * Throws AdminInputError naming the field.
 */
export function storable(field: string, v: string): string {
  const at = v.indexOf('\u0000');
  if (at !== -1) throw new AdminInputError(field, `contains U+0000 (NUL) at position ${at}, which no stored ${field} can`);
  return v;
}

function text(field: ListField, v: string | undefined): string | null {
  if (v === undefined) return null;
  if (v === '' || v.length > TEXT_MAX) throw new AdminInputError(field, `must be 1 to ${TEXT_MAX} characters`);
  return storable(field, v);
}

function state(v: string | undefined): KeyState | null {
  if (v === undefined) return null;
  if (!(KEY_STATES as readonly string[]).includes(v)) {
    throw new AdminInputError('state', `unknown state ${JSON.stringify(v)}: one of ${KEY_STATES.join(', ')}`);
  }
  return v as KeyState;
}

/** No record is older than this: 100 years. PostgreSQL's timestamps end some 4 700 years back, and a longer age failed there. */
const MAX_AGE_MS = 36_500 * 86_400_000;

function olderThan(v: string | undefined): number | null {
  if (v === undefined) return null;
  let ms: number;
  try {
    ms = parseDuration(v);
  } catch (err) {
    throw new AdminInputError('olderThan', `${(err as Error).message} (e.g. 15m, 2h, 1h30m)`);
  }
  if (ms > MAX_AGE_MS) throw new AdminInputError('olderThan', `must be at most 36500d (100 years); got ${v}`);
  return ms;
}

function flag(v: string | undefined): boolean {
  if (v === undefined || v === 'false') return false;
  if (v === 'true') return true;
  throw new AdminInputError('body', 'must be true or false');
}

function limit(v: string | undefined, withBody: boolean): number {
  const max = withBody ? MAX_PAGE_WITH_BODY : MAX_PAGE;
  if (v === undefined) return Math.min(DEFAULT_PAGE, max);
  const n = /^[0-9]{1,7}$/.test(v) ? Number(v) : NaN;
  if (!(n >= 1 && n <= max)) throw new AdminInputError('limit', `must be a whole number from 1 to ${max}${withBody ? ' with body=true' : ''}`);
  return n;
}

function tagOf(q: Omit<ListQuery, 'cursor' | 'filterTag' | 'limit' | 'withBody'>): string {
  return hash('sha256', JSON.stringify([q.state, q.route, q.tenantId, q.olderThanMs]), 'base64url').slice(0, 11);
}

/** base64url of [version, tenant id, key, filter tag]: opaque to callers. */
export function encodeCursor(c: Cursor, filterTag: string): string {
  return Buffer.from(JSON.stringify([1, c.tenantId, c.key, filterTag])).toString('base64url');
}

function decodeCursor(v: string | undefined, filterTag: string, tenantId: string | null): Cursor | null {
  if (v === undefined) return null;
  const bad = (why: string): never => {
    throw new AdminInputError('cursor', `${why}: pass back the "next" value of the previous page unchanged, with the same filters`);
  };
  if (!/^[A-Za-z0-9_-]{1,2048}$/.test(v)) bad('malformed');
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(v, 'base64url').toString('utf8'));
  } catch {
    return bad('malformed');
  }
  if (!Array.isArray(parsed) || parsed.length !== 4 || parsed[0] !== 1
    || typeof parsed[1] !== 'string' || typeof parsed[2] !== 'string' || typeof parsed[3] !== 'string') {
    return bad('malformed');
  }
  const [, t, k, tag] = parsed as [number, string, string, string];
  if (t.includes('\u0000') || k.includes('\u0000')) bad('malformed');
  if (tag !== filterTag || (tenantId !== null && t !== tenantId)) bad('made for other filters');
  return { tenantId: t, key: k };
}

/** Reads and checks the listing's parameters; throws AdminInputError naming the field. */
export function parseListQuery(p: ListParams): ListQuery {
  const base = {
    state: state(p.state),
    route: text('route', p.route),
    tenantId: text('tenantId', p.tenantId),
    olderThanMs: olderThan(p.olderThan),
  };
  const withBody = flag(p.body);
  const filterTag = tagOf(base);
  return {
    ...base,
    withBody,
    limit: limit(p.limit, withBody),
    filterTag,
    cursor: decodeCursor(p.cursor, filterTag, base.tenantId),
  };
}
