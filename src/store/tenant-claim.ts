// The claim of one tenant's distinct keys: the found read, then the insert of
// the keys that need it (src/store/sql/claim.ts; docs/storage.md). Both
// statements touch the one tenant only, so on Citus they run on one shard.
import type { Queryable } from './db/port.js';
import { toBuffer } from './db/port.js';
import type { ClaimRequest } from './records.js';
import {
  INSERT_PARAMS_PER_ROW, claimInsertStatement, foundOneStatement, foundStatement,
} from './sql/claim.js';

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

const NOTHING: ClaimRow = {
  claimed: false, claim_attempt: null, state: null, fingerprint: null, status_code: null,
  response_headers: null, response_body: null, body_retained: null, body_size: null,
  retry_after_s: null, ttl_left_ms: null, lease_over: null,
};

/** The store's one lock order: by key (the tenant is the same within a statement). */
export const byKey = (a: { key: string }, b: { key: string }): number => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);

/**
 * Settled: the insert's ON CONFLICT ... WHERE would leave this row alone
 * (negated, with SQL's NULL read as "not decided": such rows go through the
 * insert, which decides).
 */
function settled(row: FoundRow, fingerprint: Buffer): boolean {
  if (row.free !== false) return false;
  return row.lease_over === false || !fingerprint.equals(toBuffer(row.fingerprint)!);
}

/**
 * Claims `items` (distinct keys of `tenantId`); one ClaimRow per item, in
 * order. A row with state null vanished or is not yet visible: claim again.
 */
export async function claimTenant(
  db: Queryable, tenantId: string, items: readonly ClaimRequest[], singleRow = true,
): Promise<ClaimRow[]> {
  const found = items.length === 1 && singleRow
    ? await db.query<FoundRow>(foundOneStatement, [tenantId, items[0]!.key])
    : await db.query<FoundRow>(foundStatement, [tenantId, items.map((c) => c.key)]);
  const out = new Array<ClaimRow>(items.length);
  const byKeyFound = new Map<string, FoundRow>();
  for (const f of found) byKeyFound.set(f.idem_key, f);
  const toInsert: number[] = [];
  for (let i = 0; i < items.length; i++) {
    const f = byKeyFound.get(items[i]!.key);
    if (f !== undefined && settled(f, items[i]!.fingerprint)) out[i] = { ...f, claimed: false, claim_attempt: null };
    else toInsert.push(i);
  }
  if (toInsert.length === 0) return out;
  toInsert.sort((a, b) => byKey(items[a]!, items[b]!));
  const clock = found.length > 0 ? found[0]!.clock : null;
  const values = new Array<unknown>(2 + toInsert.length * INSERT_PARAMS_PER_ROW);
  values[0] = clock;
  values[1] = tenantId;
  let p = 2;
  for (const i of toInsert) {
    const c = items[i]!;
    values[p++] = c.key; values[p++] = c.fingerprint.toString('hex'); values[p++] = c.ownerToken;
    values[p++] = c.leaseMs; values[p++] = c.ttlMs; values[p++] = c.onExpiredLease;
    values[p++] = c.route; values[p++] = c.method; values[p++] = c.path;
  }
  const inserted = await db.query<InsertedRow>(claimInsertStatement(toInsert.length), values);
  const byKeyInserted = new Map<string, InsertedRow>();
  for (const r of inserted) byKeyInserted.set(r.idem_key, r);
  for (const i of toInsert) {
    const c = items[i]!;
    const r = byKeyInserted.get(c.key);
    if (r === undefined) { out[i] = NOTHING; continue; } // left alone: a concurrent claim changed it
    const claimed = r.state === 'in_flight' && r.owner_token.toLowerCase() === c.ownerToken.toLowerCase();
    // outcome_unknown set by this claim: its fingerprint matched (not returned).
    out[i] = { ...NOTHING, claimed, claim_attempt: r.attempt, state: r.state };
  }
  return out;
}
