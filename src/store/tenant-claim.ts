// The claim of one tenant's distinct keys: one call that inserts the new keys
// and reads the rows of the keys it left alone, then the takeover of those
// that need it (src/store/sql/claim.ts; docs/storage.md). Each statement
// touches the one tenant only, so on Citus it runs on one shard. On plain
// PostgreSQL a batch of several tenants goes as one call (claimTenants).
import type { Queryable } from './db/port.js';
import { StoreUnavailableError, budgetLeft, toBuffer } from './db/port.js';
import { ClaimFailedError } from '../errors.js';
import type { ClaimRequest } from './records.js';
import { INSERT_PARAMS_PER_ROW, claimStatement, claimTenantsStatement, loneInsertStatement, loneReadStatement, takeoverStatement } from './sql/claim.js';

/** What the claim learnt about one key: claimed by this request, or the row that holds it. */
export interface ClaimRow {
  claimed: boolean;
  claim_attempt: number | null;
  state: string | null;
  fingerprint: unknown;
  status_code: number | null;
  response_headers: Array<[string, string]> | null;
  response_body: unknown;
  body_retained: boolean | null;
  body_size: string | number | null;
  retry_after_s: number | null;
  ttl_left_ms: number | null;
  lease_over: boolean | null;
  /** The record's trace context (migration 8). */
  trace_context: string | null;
}

interface FoundRow extends Omit<ClaimRow, 'claimed' | 'claim_attempt'> {
  clock: number;
  idem_key: string;
  free: boolean | null;
}

interface InsertedRow {
  idem_key: string;
  state: string;
  owner_token: string;
  attempt: number;
}

/** A row of the claim call: inserted by it, or found (left alone). */
type CalledRow = (InsertedRow & { inserted: true }) | (FoundRow & { inserted: false });

/**
 * Every ClaimRow is made here, its fields always in this order: the readers of claims
 * (src/store/key-store.ts: rawFromRow, decide, toStored) then see one hidden class. Made by spreads
 * of node-postgres's rows — whose shapes differ by statement (the claim call, the lone read, the
 * call of several tenants) — they saw five or more, and each of their field reads was a megamorphic
 * load, which under load mostly missed V8's shared stub cache: about 1 000 instructions a read, ten
 * reads a replay (counted with callgrind in a proxy under replay load), and a replay cost about 15 %
 * more CPU than with this function (side by side, docs/tracing-cost.md, 2026-12-04).
 */
function claimRow(claimed: boolean, attempt: number | null, state: string | null, f: FoundRow | null): ClaimRow {
  return {
    claimed,
    claim_attempt: attempt,
    state,
    fingerprint: f === null ? null : f.fingerprint,
    status_code: f === null ? null : f.status_code,
    response_headers: f === null ? null : f.response_headers,
    response_body: f === null ? null : f.response_body,
    body_retained: f === null ? null : f.body_retained,
    body_size: f === null ? null : f.body_size,
    retry_after_s: f === null ? null : f.retry_after_s,
    ttl_left_ms: f === null ? null : f.ttl_left_ms,
    lease_over: f === null ? null : f.lease_over,
    trace_context: f === null ? null : f.trace_context,
  };
}

/** No row: it vanished, or a concurrent claim changed it (the caller claims again). */
const NOTHING: ClaimRow = claimRow(false, null, null, null);

/** The store's one lock order within a tenant: by key. */
export const byKey = (a: { key: string }, b: { key: string }): number => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);

/** The same order for a statement of several tenants: by tenant, then by key. */
export const byTenantAndKey = (a: { tenantId: string; key: string }, b: { tenantId: string; key: string }): number =>
  (a.tenantId < b.tenantId ? -1 : a.tenantId > b.tenantId ? 1 : byKey(a, b));

/**
 * Settled: the insert's ON CONFLICT ... WHERE would leave this row alone
 * (negated, with SQL's NULL read as "not decided": such rows go through the
 * insert, which decides).
 */
function settled(row: FoundRow, fingerprint: Buffer): boolean {
  if (row.free !== false) return false;
  return row.lease_over === false || !fingerprint.equals(toBuffer(row.fingerprint)!);
}

/** Sends the takeover of items[idx] (sorted by key: the lock order); the rows it wrote, by key. */
async function takeover(
  db: Queryable, tenantId: string, items: readonly ClaimRequest[], idx: number[], clock: number, budgetMs: number | undefined,
): Promise<Map<string, InsertedRow>> {
  idx.sort((a, b) => byKey(items[a]!, items[b]!));
  const values = new Array<unknown>(2 + idx.length * INSERT_PARAMS_PER_ROW);
  values[0] = clock;
  values[1] = tenantId;
  let p = 2;
  for (const i of idx) {
    const c = items[i]!;
    values[p++] = c.key; values[p++] = c.fingerprint.toString('hex'); values[p++] = c.ownerToken;
    values[p++] = c.leaseMs; values[p++] = c.ttlMs; values[p++] = c.onExpiredLease;
    values[p++] = c.route; values[p++] = c.method; values[p++] = c.path;
  }
  const rows = await db.query<InsertedRow>(takeoverStatement(idx.length), values, budgetMs);
  const byKeyWritten = new Map<string, InsertedRow>();
  for (const r of rows) byKeyWritten.set(r.idem_key, r);
  return byKeyWritten;
}

/** The claim call for all of `items` (sorted by key: the lock order). */
function claimCall(db: Queryable, tenantId: string, items: readonly ClaimRequest[], budgetMs: number | undefined): Promise<CalledRow[]> {
  const sorted = items.length === 1 ? items : [...items].sort(byKey);
  return db.query<CalledRow>(claimStatement, [
    tenantId, sorted.map((c) => c.key), sorted.map((c) => c.fingerprint.toString('hex')), sorted.map((c) => c.ownerToken),
    sorted.map((c) => c.leaseMs), sorted.map((c) => c.ttlMs), sorted.map((c) => c.onExpiredLease),
    sorted.map((c) => c.route), sorted.map((c) => c.method), sorted.map((c) => c.path),
  ], budgetMs);
}

function fromInserted(r: InsertedRow, c: ClaimRequest): ClaimRow {
  const claimed = r.state === 'in_flight' && r.owner_token.toLowerCase() === c.ownerToken.toLowerCase();
  // outcome_unknown set by this claim: its fingerprint matched (not returned).
  return claimRow(claimed, r.attempt, r.state, null);
}

/**
 * Claims `items` (distinct keys of `tenantId`); one ClaimRow per item, in
 * order. A row with state null vanished, or a concurrent claim changed it:
 * the caller claims again. `budgetMs` (what is left of store.timeout) bounds
 * the statements together, not each one.
 */
export async function claimTenant(
  db: Queryable, tenantId: string, items: readonly ClaimRequest[], budgetMs?: number,
): Promise<ClaimRow[]> {
  const t0 = budgetMs === undefined ? 0 : performance.now();
  const called = await claimCall(db, tenantId, items, budgetMs);
  try {
    return await settle(db, tenantId, items, called, budgetLeft(budgetMs, t0));
  } catch (err) {
    throw claimFailed(err, called.some((r) => r.inserted));
  }
}

/**
 * One key's claim as two single-row statements (src/store/sql/claim.ts:
 * loneReadStatement) instead of the call: the read, and only without a row
 * the insert. The same answers as claimTenant for one item; a duplicate is
 * one statement, a new key two.
 */
export async function claimLone(db: Queryable, tenantId: string, c: ClaimRequest, budgetMs?: number): Promise<ClaimRow> {
  const t0 = budgetMs === undefined ? 0 : performance.now();
  const found = await db.query<FoundRow & { inserted: false }>(loneReadStatement, [tenantId, c.key], budgetMs);
  if (found.length > 0) return (await settle(db, tenantId, [c], found, budgetLeft(budgetMs, t0)))[0]!;
  const [r] = await db.query<InsertedRow>(loneInsertStatement, [
    tenantId, c.key, c.fingerprint.toString('hex'), c.ownerToken, c.onExpiredLease, c.leaseMs, c.ttlMs, c.route, c.method, c.path,
  ], budgetLeft(budgetMs, t0));
  return r === undefined ? NOTHING : fromInserted(r, c); // nothing inserted: a row committed since the read, claim again
}

/** One tenant's distinct keys, as claimTenants takes them. */
export interface TenantGroup {
  readonly tenantId: string;
  readonly items: readonly ClaimRequest[];
}

/**
 * The claims of several tenants in one call (plain PostgreSQL only: the call
 * touches every tenant of the batch; src/store/sql/claim.ts), then each
 * tenant's takeovers, as claimTenant does them. One ClaimRow[] per group, in
 * the order of its items.
 */
export async function claimTenants(db: Queryable, groups: readonly TenantGroup[], budgetMs?: number): Promise<ClaimRow[][]> {
  const t0 = budgetMs === undefined ? 0 : performance.now();
  const sorted = groups.flatMap((g) => g.items).sort(byTenantAndKey);
  // Each tenant's slice of the sorted arrays: its id and its last (1-based) index.
  const tenants: string[] = [];
  const ends: number[] = [];
  for (let i = 0; i < sorted.length; i++) {
    if (i + 1 === sorted.length || sorted[i + 1]!.tenantId !== sorted[i]!.tenantId) {
      tenants.push(sorted[i]!.tenantId);
      ends.push(i + 1);
    }
  }
  const rows = await db.query<CalledRow & { tenant_id: string }>(claimTenantsStatement, [
    tenants, ends, sorted.map((c) => c.key), sorted.map((c) => c.fingerprint.toString('hex')),
    sorted.map((c) => c.ownerToken), sorted.map((c) => c.leaseMs), sorted.map((c) => c.ttlMs),
    sorted.map((c) => c.onExpiredLease), sorted.map((c) => c.route), sorted.map((c) => c.method), sorted.map((c) => c.path),
  ], budgetMs);
  const byTenant = new Map<string, CalledRow[]>();
  for (const r of rows) {
    const list = byTenant.get(r.tenant_id);
    if (list === undefined) byTenant.set(r.tenant_id, [r]);
    else list.push(r);
  }
  const budget = budgetLeft(budgetMs, t0);
  // Each tenant's takeovers side by side: a failure is marked if the call inserted keys or another took one over.
  return allClaims(
    groups.map((g) => settle(db, g.tenantId, g.items, byTenant.get(g.tenantId) ?? [], budget)),
    (settled) => rows.some((r) => r.inserted) || settled.some((g) => g.some((c) => c.claimed)),
  );
}

/**
 * Waits for every one of a claim's statements that run side by side (each tenant's, or each key's); fails as the
 * first that failed, once all have settled (one still running may yet take a key), marked by claimFailed when
 * `claimed` says keys were taken (given what the others answered).
 */
export async function allClaims<T>(claims: ReadonlyArray<Promise<T>>, claimed: (settled: readonly T[]) => boolean): Promise<T[]> {
  const results = await Promise.allSettled(claims);
  const settled: T[] = [];
  let failed: PromiseRejectedResult | undefined;
  for (const r of results) {
    if (r.status === 'fulfilled') settled.push(r.value);
    else failed ??= r;
  }
  if (failed !== undefined) throw claimFailed(failed.reason, claimed(settled));
  return settled;
}

/**
 * A claim's failure, `err`, marked as one that may have taken keys (StoreUnavailableError.maybeApplied) when
 * `claimed`: a statement of the same claim — the call before a takeover, or another of the batch's claims — took
 * keys before it failed. Every request of the batch is answered 503 and runs nothing; marked, each gives its claim
 * back (src/lifecycle/give-back.ts, fenced by its owner token). Unmarked — a takeover refused unsent, a connection
 * that could not be had — a key the call inserted would stay in flight for its whole lease (every retry 409), and
 * on an `onExpiredLease: fail` route then become outcome_unknown for an operator, though nothing ran. A failure
 * that is not the store's being out of reach (an SQL error in a takeover) is wrapped as a ClaimFailedError: its
 * requests are answered 500, and give their claims back the same way.
 */
function claimFailed(err: unknown, claimed: boolean): unknown {
  if (!claimed || err instanceof ClaimFailedError) return err; // a tenant's own claim (claimTenant) marked it already
  if (!(err instanceof StoreUnavailableError)) return new ClaimFailedError(err);
  err.maybeApplied = true;
  return err;
}

/** What the claim call's rows say for each of `items`, with the takeover of those that need it. */
async function settle(
  db: Queryable, tenantId: string, items: readonly ClaimRequest[], called: readonly CalledRow[], budgetMs: number | undefined,
): Promise<ClaimRow[]> {
  const out = new Array<ClaimRow>(items.length);
  const inserted = new Map<string, InsertedRow>();
  const byKeyFound = new Map<string, FoundRow>();
  let clock = 0;
  for (const r of called) {
    if (r.inserted) inserted.set(r.idem_key, r);
    else { byKeyFound.set(r.idem_key, r); clock = r.clock; }
  }
  const toTake: number[] = [];
  for (let i = 0; i < items.length; i++) {
    const c = items[i]!;
    const r = inserted.get(c.key);
    const f = byKeyFound.get(c.key);
    if (r !== undefined) out[i] = fromInserted(r, c);
    else if (f === undefined) out[i] = NOTHING; // deleted since the insert: claim again
    else if (settled(f, c.fingerprint)) out[i] = claimRow(false, null, f.state, f);
    else toTake.push(i);
  }
  if (toTake.length === 0) return out;
  const taken = await takeover(db, tenantId, items, toTake, clock, budgetMs);
  for (const i of toTake) {
    const r = taken.get(items[i]!.key);
    out[i] = r === undefined ? NOTHING : fromInserted(r, items[i]!); // left alone: a concurrent claim changed it
  }
  return out;
}
