import { reservedEntry, responseHeadersOf, TRACE_RECORD_HEADER } from '../proxy/headers.js';
import type { Db } from '../store/db/port.js';
import type { KeyStore } from '../store/key-store.js';
import { recordKind, referenceOf, type RecordKind } from '../proxy/reference.js';
import type { KeyRecord } from '../store/records.js';
import { listStatement, listTenantStatement } from '../store/sql/list.js';
import { resolveExecutedStatement } from '../store/sql/resolve-executed.js';
import { resolveNotExecutedStatement } from '../store/sql/resolve-not-executed.js';
import { tenantExistsStatement } from '../store/sql/tenant-exists.js';
import { AdminInputError, encodeCursor, type Cursor, type KeyState, type ListQuery } from './query.js';
import { executedRecord } from './resolution.js';

// The operators' key operations (docs/operations.md, Admin API): list, show,
// purge, resolve. One implementation with two front doors, the admin
// listener (src/http/admin-keys.ts) and the CLI (src/cli/keys.ts).

/** Rows one listing call examines at most, whatever the filters. */
export const SCAN_BOUND = 10_000;

export type Resolution = 'executed' | 'not_executed';
export const RESOLUTIONS: readonly Resolution[] = ['executed', 'not_executed'];

export class KeyNotFoundError extends Error {
  readonly code = 'IDEMP_ADMIN_KEY_NOT_FOUND';
  constructor() {
    super('no record for this key under this tenant id (or it expired and acts as absent)');
  }
}

export class NotOutcomeUnknownError extends Error {
  readonly code = 'IDEMP_ADMIN_NOT_OUTCOME_UNKNOWN';
  constructor(readonly state: string) {
    super(`the key is ${state}, not outcome_unknown: only an outcome_unknown key can be resolved`);
  }
}

/** One key as the admin API and `keys list` show it. Never the body unless asked. */
export interface KeyView {
  readonly tenantId: string;
  readonly key: string;
  readonly state: KeyState;
  readonly storedState: string;
  readonly leaseExpired: boolean;
  readonly attempt: number;
  readonly onExpiredLease: string;
  readonly route: string | null;
  readonly method: string | null;
  readonly path: string | null;
  readonly createdAt: string;
  readonly lockedUntil: string | null;
  readonly completedAt: string | null;
  readonly expiresAt: string;
  readonly status: number | null;
  readonly bodyBytes: number | null;
  readonly bodyRetained: boolean | null;
  /** The response's headers, without the proxy's reserved entries. */
  /** full (body stored), marker (body too large to store), reference (the current body GET on replay); null: no response yet. */
  readonly record: RecordKind | null;
  /** A reference record's path on the upstream (what a replay GETs); null: not a reference. */
  readonly reference?: string | null;
  readonly responseHeaders?: ReadonlyArray<readonly [string, string]> | null;
  /** The traceparent of the traced execution that made the record (its replays' spans link to it); null: none kept. */
  readonly trace?: string | null;
  readonly bodyBase64?: string | null;
}

export interface KeyPage {
  readonly keys: KeyView[];
  /** Pass back as `cursor` for the next page; null at the end. */
  readonly next: string | null;
  /** Rows examined for this page (at most SCAN_BOUND). */
  readonly scanned: number;
}

const iso = (d: unknown): string | null => (d == null ? null : (d as Date).toISOString());

function effectiveState(stored: string, leaseExpired: boolean, onExpiredLease: string): KeyState {
  if (stored === 'outcome_unknown' || (stored === 'in_flight' && leaseExpired && onExpiredLease === 'fail')) return 'outcome_unknown';
  return stored as KeyState;
}

function viewOfRow(r: Record<string, unknown>): KeyView {
  return {
    tenantId: r.tenant_id as string,
    key: r.idem_key as string,
    state: r.effective_state as KeyState,
    storedState: r.state as string,
    leaseExpired: r.lease_expired as boolean,
    attempt: r.attempt as number,
    onExpiredLease: r.on_expired_lease as string,
    route: (r.route as string | null) ?? null,
    method: (r.method as string | null) ?? null,
    path: (r.path as string | null) ?? null,
    createdAt: iso(r.created_at)!,
    lockedUntil: iso(r.locked_until),
    completedAt: iso(r.completed_at),
    expiresAt: iso(r.expires_at)!,
    status: (r.status_code as number | null) ?? null,
    bodyBytes: r.body_size == null ? null : Number(r.body_size),
    bodyRetained: (r.body_retained as boolean | null) ?? null,
    record: (r.record_kind as RecordKind | null) ?? null,
  };
}

/** A stored record as a view; with `withBody`, its headers and body too. */
export function viewOfRecord(rec: KeyRecord, withBody: boolean): KeyView {
  return {
    tenantId: rec.tenantId,
    key: rec.key,
    state: effectiveState(rec.state, rec.leaseExpired, rec.onExpiredLease),
    storedState: rec.state,
    leaseExpired: rec.leaseExpired,
    attempt: rec.attempt,
    onExpiredLease: rec.onExpiredLease,
    route: rec.route,
    method: rec.method,
    path: rec.path,
    createdAt: rec.createdAt.toISOString(),
    lockedUntil: rec.lockedUntil?.toISOString() ?? null,
    completedAt: rec.completedAt?.toISOString() ?? null,
    expiresAt: rec.expiresAt.toISOString(),
    status: rec.statusCode,
    bodyBytes: rec.bodySize,
    bodyRetained: rec.bodyRetained,
    ...storedHeaders(rec),
    ...(withBody ? { bodyBase64: rec.responseBody?.toString('base64') ?? null } : {}),
  };
}

/**
 * How a record is shown: its kind, the response's own headers, and the proxy's reserved entries as their
 * own fields: the reference, and the trace context (its column, or the reserved entry of a record stored
 * before migration 8).
 */
export function storedHeaders(rec: KeyRecord): StoredView {
  const h = rec.responseHeaders;
  const record = recordKind(rec.bodyRetained, h);
  if (h === null) return { record, reference: null, responseHeaders: null, trace: null };
  return { record, reference: referenceOf(h), responseHeaders: responseHeadersOf(h), trace: rec.traceContext ?? reservedEntry(h, TRACE_RECORD_HEADER) };
}

interface StoredView {
  readonly record: RecordKind | null;
  readonly reference: string | null;
  readonly responseHeaders: Array<[string, string]> | null;
  readonly trace: string | null;
}

export class KeyOperations {
  constructor(private readonly db: Db, private readonly store: KeyStore) {}

  /** One page of keys, keyset-paged on the primary key (docs/operations.md). */
  async list(q: ListQuery): Promise<KeyPage> {
    if (q.tenantId !== null && q.cursor === null) {
      const [row] = await this.db.query<{ found: boolean }>(tenantExistsStatement, [q.tenantId]);
      if (row?.found !== true) throw new AdminInputError('tenantId', `no record is stored under tenant id ${JSON.stringify(q.tenantId)}`, 404);
    }
    const after = q.cursor ?? { tenantId: '', key: '' };
    const stmt = q.tenantId === null ? listStatement : listTenantStatement;
    const first = q.tenantId === null ? after.tenantId : q.tenantId;
    const rows = await this.db.query<Record<string, unknown>>(stmt, [
      first, after.key, SCAN_BOUND, q.state, q.route, q.olderThanMs, q.limit,
    ]);
    const summary = rows[0]!;
    const scanned = summary.scanned as number;
    const hits = rows.filter((r) => r.idem_key != null);
    let keys = hits.map(viewOfRow);
    if (q.withBody) keys = await Promise.all(keys.map((k) => this.withBody(k)));
    let next: Cursor | null = null;
    const last = hits[hits.length - 1];
    const lastScanned = { tenantId: summary.last_tenant as string, key: summary.last_key as string };
    if (hits.length === q.limit && last !== undefined) {
      const atEnd = scanned < SCAN_BOUND && last.tenant_id === lastScanned.tenantId && last.idem_key === lastScanned.key;
      if (!atEnd) next = { tenantId: last.tenant_id as string, key: last.idem_key as string };
    } else if (scanned === SCAN_BOUND) {
      next = lastScanned;
    }
    return { keys, next: next === null ? null : encodeCursor(next, q.filterTag), scanned };
  }

  private async withBody(k: KeyView): Promise<KeyView> {
    const rec = await this.store.get(k.tenantId, k.key, true);
    return rec === null ? k : { ...k, ...storedHeaders(rec), bodyBase64: rec.responseBody?.toString('base64') ?? null };
  }

  /** The record, expired or not (KeyRecord says which); null when there is none. */
  show(tenantId: string, key: string, withBody: boolean): Promise<KeyRecord | null> {
    return this.store.get(tenantId, key, withBody);
  }

  /** Removes one record whatever its state; returns the state it had, or null. */
  purge(tenantId: string, key: string): Promise<string | null> {
    return this.store.purge(tenantId, key);
  }

  /**
   * Resolves an outcome_unknown key: `executed` completes it with a record
   * saying the operation ran (src/admin/resolution.ts), `not_executed` frees
   * it. Throws KeyNotFoundError or NotOutcomeUnknownError otherwise.
   */
  async resolve(tenantId: string, key: string, as: Resolution, now = new Date()): Promise<{ was: string }> {
    let rows: Array<{ state: string }>;
    if (as === 'executed') {
      const r = executedRecord(now);
      rows = await this.db.query(resolveExecutedStatement, [
        tenantId, key, r.status, JSON.stringify(r.headers), r.body.toString('hex'), r.body.length,
      ]);
    } else {
      rows = await this.db.query(resolveNotExecutedStatement, [tenantId, key]);
    }
    if (rows.length === 1) return { was: 'outcome_unknown' };
    const rec = await this.store.get(tenantId, key);
    if (rec === null || rec.expired) throw new KeyNotFoundError();
    throw new NotOutcomeUnknownError(effectiveState(rec.state, rec.leaseExpired, rec.onExpiredLease));
  }
}
