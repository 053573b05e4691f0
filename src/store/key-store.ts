import { ClaimRaceError, isRolledBack } from '../errors.js';
import { Batcher } from './batcher.js';
import { type Db, type Queryable, budgetLeft, toBuffer } from './db/port.js';
import type {
  ClaimOutcome, ClaimRequest, CommitOutcome, CommitRequest, KeyRecord, StoredResponse,
} from './records.js';
import { type ClaimRow, allClaims, byKey, byTenantAndKey, claimLone, claimTenant, claimTenants } from './tenant-claim.js';
import { commitOneKeptStatement, commitOneStatement, commitStatement, commitTenantsStatement } from './sql/commit.js';
import { releaseStatement } from './sql/release.js';
import { abandonFreshStatement, abandonTakeoverStatement } from './sql/abandon.js';
import { markUnknownStatement } from './sql/mark-unknown.js';
import { extendStatement } from './sql/extend.js';
import { getStatement } from './sql/get.js';
import { purgeStatement } from './sql/purge.js';

export interface KeyStoreOptions {
  readonly maxBatch?: number;
  /** Statements of one kind in flight at once (each on its own connection). */
  readonly maxInFlight?: number;
  /** Told the size of every claim or commit statement sent (rows in it). */
  readonly onBatch?: (statement: 'claim' | 'commit', rows: number) => void;
  /**
   * A lone commit goes as its single-row statement (default true). False
   * sends every one through the batch statement: tests run the store's
   * contract against both. (A claim is one statement for any number of
   * keys: the claim call takes arrays.)
   */
  readonly singleRowStatements?: boolean;
  /**
   * A batch that mixes tenants goes as one claim call and one commit
   * statement for all of them (default false: one per tenant). True on plain
   * PostgreSQL and the embedded store, where src/app.ts sets it; never on
   * Citus, where a statement must touch one tenant to run on one shard
   * (docs/scale.md). With keyScope: tenantAndPath every request path is a
   * tenant: without it, requests to different paths never share a statement.
   */
  readonly crossTenantBatches?: boolean;
  /**
   * Every key is claimed and committed by single-row statements (default
   * false): a claim by a read and, only without a row, an insert
   * (claimLone); a commit by the lone UPDATE. A batch's keys go side by side,
   * each its own statement. True on Citus, where src/app.ts sets it: there a
   * single-row statement is planned once per session (its fast path), while
   * the claim call and the batch commit are planned at every execution, on
   * the node they reach and again inside it (docs/scale.md); on plain
   * PostgreSQL one statement per batch is cheaper (one round trip, one
   * flush).
   */
  readonly perKeyStatements?: boolean;
  /**
   * Where a tenant's request-path statements go (claims, commits, releases,
   * lease extensions, outcome-unknown marks, reads of one key): on Citus the
   * node of the tenant's shard (src/store/citus/tenant-router.ts). Default:
   * the store's database, which purges and cross-tenant batches always use.
   */
  readonly tenantDb?: (tenantId: string) => Queryable;
}

type RawClaim =
  | { readonly kind: 'claimed'; readonly attempt: number }
  | { readonly kind: 'decided'; readonly outcome: ClaimOutcome }
  | { readonly kind: 'absent' };

/** A row the commit completed (kept: already complete under this claim's token, left as it was). */
interface CommitRow { idem_key: string; ttl_left_ms: number; kept: boolean }

const CLAIM_ATTEMPTS = 5;
const EMPTY = Buffer.alloc(0);

export { ClaimRaceError };

/**
 * The key store: the state machine of one idempotency key, one statement per
 * transition. Claims and commits of concurrent requests are batched.
 */
export class KeyStore {
  private readonly claims: Batcher<ClaimRequest, RawClaim>;
  private readonly commits: Batcher<CommitRequest, CommitOutcome>;
  private readonly onBatch: KeyStoreOptions['onBatch'];
  private readonly singleRow: boolean;
  private readonly crossTenant: boolean;
  private readonly perKey: boolean;
  private readonly at: (tenantId: string) => Queryable;

  constructor(private readonly db: Db, opts: KeyStoreOptions = {}) {
    this.onBatch = opts.onBatch;
    this.singleRow = opts.singleRowStatements ?? true;
    this.crossTenant = opts.crossTenantBatches ?? false;
    this.perKey = opts.perKeyStatements ?? false;
    this.at = opts.tenantDb ?? (() => db);
    const maxBatch = opts.maxBatch ?? 256;
    const maxInFlight = opts.maxInFlight ?? (db.singleInstance ? 1 : 2);
    const sizes = { maxBatch, maxInFlight, timeoutMs: db.timeoutMs };
    this.claims = new Batcher({
      run: (items, budgetMs) => this.runClaims(items, budgetMs),
      ...sizes,
    });
    this.commits = new Batcher({
      run: (items, budgetMs) => this.runCommits(items, budgetMs),
      key: (c) => `${c.tenantId}\u0000${c.key}`,
      ...sizes,
    });
  }

  get description(): string {
    return this.db.description;
  }

  /**
   * Claims a key or reports what holds it, in the order of docs/contract.md (step 5): mismatch, then in
   * flight, then outcome unknown, then complete.
   */
  async claim(req: ClaimRequest): Promise<ClaimOutcome> {
    for (let i = 0; i < CLAIM_ATTEMPTS; i++) {
      let raw: RawClaim;
      try {
        raw = await this.claims.submit(req);
      } catch (err) {
        // Rolled back by PostgreSQL (a deadlock or a serialization conflict it broke) with nothing taken — a claim
        // that had taken keys fails as a ClaimFailedError instead (src/store/tenant-claim.ts): claimed again.
        if (isRolledBack(err) && i + 1 < CLAIM_ATTEMPTS) continue;
        throw err;
      }
      if (raw.kind === 'claimed') return raw;
      if (raw.kind === 'decided') return raw.outcome;
      // 'absent': vanished or not yet visible: claim again
    }
    throw new ClaimRaceError(CLAIM_ATTEMPTS);
  }

  commit(req: CommitRequest): Promise<CommitOutcome> {
    return this.commits.submit(req);
  }

  async release(tenantId: string, key: string, ownerToken: string): Promise<void> {
    await this.at(tenantId).query(releaseStatement, [tenantId, key, ownerToken]);
  }

  /**
   * Gives back a claim whose reply was lost (src/store/sql/abandon.ts): `released` (the claim had inserted the
   * key), `lease_ended` (it had taken an expired lease over), `none` (it never took effect, or was taken over).
   */
  async abandon(tenantId: string, key: string, ownerToken: string): Promise<'released' | 'lease_ended' | 'none'> {
    const db = this.at(tenantId);
    if ((await db.query(abandonFreshStatement, [tenantId, key, ownerToken])).length === 1) return 'released';
    return (await db.query(abandonTakeoverStatement, [tenantId, key, ownerToken])).length === 1 ? 'lease_ended' : 'none';
  }

  /**
   * Marks a claimed key outcome_unknown (the outcome probe could not tell
   * whether the operation ran): every retry gets 409 until an operator
   * resolves it or its retention ends. Fenced by the owner token; false when
   * the claim was taken over meanwhile.
   */
  async markUnknown(tenantId: string, key: string, ownerToken: string): Promise<boolean> {
    const rows = await this.at(tenantId).query(markUnknownStatement, [tenantId, key, ownerToken]);
    return rows.length === 1;
  }

  /** Extends the lease; false when the lease was lost to a takeover. */
  async extend(tenantId: string, key: string, ownerToken: string, leaseMs: number): Promise<boolean> {
    const rows = await this.at(tenantId).query(extendStatement, [tenantId, key, ownerToken, leaseMs]);
    return rows.length === 1;
  }

  async get(tenantId: string, key: string, withBody = false): Promise<KeyRecord | null> {
    const rows = await this.at(tenantId).query<Record<string, unknown>>(getStatement, [tenantId, key, withBody]);
    const r = rows[0];
    if (r === undefined) return null;
    return {
      tenantId: r.tenant_id as string,
      key: r.idem_key as string,
      state: r.state as KeyRecord['state'],
      attempt: r.attempt as number,
      onExpiredLease: r.on_expired_lease as KeyRecord['onExpiredLease'],
      fingerprint: toBuffer(r.fingerprint) ?? EMPTY,
      lockedUntil: (r.locked_until as Date | null) ?? null,
      expiresAt: r.expires_at as Date,
      createdAt: r.created_at as Date,
      completedAt: (r.completed_at as Date | null) ?? null,
      statusCode: (r.status_code as number | null) ?? null,
      responseHeaders: (r.response_headers as Array<[string, string]> | null) ?? null,
      responseBody: toBuffer(r.response_body),
      traceContext: (r.trace_context as string | null) ?? null,
      bodyRetained: (r.body_retained as boolean | null) ?? null,
      bodySize: r.body_size == null ? null : Number(r.body_size),
      route: (r.route as string | null) ?? null,
      method: (r.method as string | null) ?? null,
      path: (r.path as string | null) ?? null,
      expired: r.expired as boolean,
      leaseExpired: r.lease_expired as boolean,
      retryAfterS: (r.retry_after_s as number | null) ?? 1,
    };
  }

  /** Removes one record whatever its state; returns the state it had. */
  async purge(tenantId: string, key: string): Promise<string | null> {
    const rows = await this.db.query<{ state: string }>(purgeStatement, [tenantId, key]);
    return rows[0]?.state ?? null;
  }

  /**
   * One batch of claims, per tenant: one claim call (insert the new keys,
   * read the others) and, where needed, a takeover (each statement
   * touches one tenant: one shard on Citus; the tenants of a batch run side
   * by side). With crossTenantBatches the tenants of a batch share one claim
   * call (takeovers stay per tenant: rare). Requests for a key
   * already in the batch (a retry storm) are not sent: they get their answer
   * from the first one's row — a key this batch claimed is in flight for
   * them — so a storm of N duplicates costs one round trip, not N.
   */
  private async runClaims(items: readonly ClaimRequest[], budgetMs?: number): Promise<RawClaim[]> {
    const n = items.length;
    if (n === 1) {
      const c = items[0]!;
      this.onBatch?.('claim', 1);
      return [rawFromRow(await this.claimOne(c, budgetMs), c.fingerprint)];
    }
    const firstOf = new Map<string, number>();
    const tenants = new Map<string, number[]>();
    for (let i = 0; i < n; i++) {
      const c = items[i]!;
      const id = `${c.tenantId}\u0000${c.key}`;
      if (firstOf.has(id)) continue;
      firstOf.set(id, i);
      const group = tenants.get(c.tenantId);
      if (group === undefined) tenants.set(c.tenantId, [i]);
      else group.push(i);
    }
    const rowOf = new Array<ClaimRow | undefined>(n);
    if (this.crossTenant && tenants.size > 1) {
      const groups = [...tenants].map(([tenantId, idx]) => ({ tenantId, items: idx.map((i) => items[i]!) }));
      this.onBatch?.('claim', firstOf.size);
      const rows = await claimTenants(this.db, groups, budgetMs);
      let g = 0;
      for (const idx of tenants.values()) {
        const group = rows[g++]!;
        for (let j = 0; j < idx.length; j++) rowOf[idx[j]!] = group[j];
      }
    } else {
      // Side by side: a statement a tenant, or a key (perKeyStatements). When one fails, the batch fails with its
      // error once all have settled, marked (allClaims) if another claimed keys: their requests, answered 503
      // with the rest, then give them back.
      const claims: Array<Promise<void>> = [];
      for (const [tenantId, idx] of tenants) {
        this.onBatch?.('claim', idx.length);
        if (idx.length === 1 || this.perKey) {
          for (const i of idx) claims.push(this.claimOne(items[i]!, budgetMs).then((row) => { rowOf[i] = row; }));
        } else {
          claims.push(claimTenant(this.at(tenantId), tenantId, idx.map((i) => items[i]!), budgetMs).then((rows) => {
            for (let j = 0; j < idx.length; j++) rowOf[idx[j]!] = rows[j];
          }));
        }
      }
      if (claims.length === 1) await claims[0];
      else await allClaims(claims, () => rowOf.some((r) => r?.claimed === true));
    }
    const out = new Array<RawClaim>(n);
    for (let i = 0; i < n; i++) {
      const row = rowOf[i];
      if (row !== undefined) { out[i] = rawFromRow(row, items[i]!.fingerprint); continue; }
      const c = items[i]!;
      const first = firstOf.get(`${c.tenantId}\u0000${c.key}`)!;
      out[i] = folded(out[first], rowOf[first], items[first]!, c);
    }
    return out;
  }

  private async claimOne(c: ClaimRequest, budgetMs?: number): Promise<ClaimRow> {
    const db = this.at(c.tenantId);
    return this.perKey ? claimLone(db, c.tenantId, c, budgetMs) : (await claimTenant(db, c.tenantId, [c], budgetMs))[0]!;
  }

  /**
   * One commit statement per tenant of the batch, its rows in key order (the
   * claims' lock order); with crossTenantBatches one for the whole batch.
   */
  private async runCommits(items: readonly CommitRequest[], budgetMs?: number): Promise<CommitOutcome[]> {
    const tenants = new Map<string, CommitRequest[]>();
    for (const c of items) {
      const group = tenants.get(c.tenantId);
      if (group === undefined) tenants.set(c.tenantId, [c]);
      else group.push(c);
    }
    const done = new Map<string, CommitOutcome>();
    if (this.crossTenant && tenants.size > 1) {
      this.onBatch?.('commit', items.length);
      for (const r of await this.commitTenants(items, budgetMs)) {
        done.set(`${r.tenant_id}\u0000${r.idem_key}`, { committed: true, ttlLeftMs: r.ttl_left_ms, kept: r.kept });
      }
      return items.map((c): CommitOutcome => done.get(`${c.tenantId}\u0000${c.key}`) ?? { committed: false });
    }
    await Promise.all([...tenants].map(async ([tenantId, group]) => {
      this.onBatch?.('commit', group.length);
      for (const r of await this.commitTenant(tenantId, group, budgetMs)) {
        done.set(`${tenantId}\u0000${r.idem_key}`, { committed: true, ttlLeftMs: r.ttl_left_ms, kept: r.kept });
      }
    }));
    return items.map((c): CommitOutcome => done.get(`${c.tenantId}\u0000${c.key}`) ?? { committed: false });
  }

  /** Every row of a batch of several tenants in one statement, sorted by tenant, then key (the claims' lock order). */
  private commitTenants(items: readonly CommitRequest[], budgetMs?: number): Promise<Array<CommitRow & { tenant_id: string }>> {
    const sorted = [...items].sort(byTenantAndKey);
    return this.db.query(commitTenantsStatement, [
      sorted.map((c) => c.tenantId), sorted.map((c) => c.key), sorted.map((c) => c.ownerToken), sorted.map((c) => c.response.status),
      sorted.map((c) => JSON.stringify(c.response.headers)), sorted.map((c) => c.response.body.toString('hex')),
      sorted.map((c) => c.response.bodyRetained), sorted.map((c) => c.response.bodySize), sorted.map((c) => c.response.trace ?? null),
    ], budgetMs);
  }

  private async commitTenant(tenantId: string, group: CommitRequest[], budgetMs?: number): Promise<CommitRow[]> {
    if (group.length > 1 && this.perKey) {
      // Citus: each key by its own fast-path statement, side by side (perKeyStatements).
      return (await Promise.all(group.map((c) => this.commitTenant(tenantId, [c], budgetMs)))).flat();
    }
    if (group.length === 1 && this.singleRow) {
      const c = group[0]!;
      const db = this.at(tenantId);
      const t0 = budgetMs === undefined ? 0 : performance.now();
      const rows = await db.query<CommitRow>(commitOneStatement, [
        tenantId, c.key, c.ownerToken, c.response.status, JSON.stringify(c.response.headers),
        c.response.body.toString('hex'), c.response.bodyRetained, c.response.bodySize, c.response.trace ?? null,
      ], budgetMs);
      // Nothing written: whether it is already complete under this token, within what the update left of the bound.
      return rows.length > 0 ? rows : db.query<CommitRow>(commitOneKeptStatement, [tenantId, c.key, c.ownerToken], budgetLeft(budgetMs, t0));
    }
    group.sort(byKey);
    return this.at(tenantId).query(commitStatement, [
      tenantId, group.map((c) => c.key), group.map((c) => c.ownerToken), group.map((c) => c.response.status),
      group.map((c) => JSON.stringify(c.response.headers)), group.map((c) => c.response.body.toString('hex')),
      group.map((c) => c.response.bodyRetained), group.map((c) => c.response.bodySize), group.map((c) => c.response.trace ?? null),
    ], budgetMs);
  }
}

function rawFromRow(row: ClaimRow, fingerprint: Buffer): RawClaim {
  if (row.claimed) return { kind: 'claimed', attempt: row.claim_attempt ?? 1 };
  if (row.state === null) return { kind: 'absent' };
  const outcome = decide(row, fingerprint);
  return outcome === null ? { kind: 'absent' } : { kind: 'decided', outcome };
}

/** The answer for a duplicate folded into the same batch as `first`. */
function folded(firstRaw: RawClaim | undefined, firstRow: ClaimRow | undefined, first: ClaimRequest, dup: ClaimRequest): RawClaim {
  if (firstRaw === undefined || firstRaw.kind === 'absent') return { kind: 'absent' };
  if (firstRaw.kind === 'claimed') {
    // The key was claimed by this very statement: in flight for everyone else.
    if (!dup.fingerprint.equals(first.fingerprint)) return { kind: 'decided', outcome: { kind: 'mismatch' } };
    return { kind: 'decided', outcome: { kind: 'in_flight', retryAfterS: Math.max(1, Math.ceil(first.leaseMs / 1000)) } };
  }
  if (firstRow !== undefined && firstRow.fingerprint != null) {
    return rawFromRow(firstRow, dup.fingerprint);
  }
  // outcome_unknown set by this statement (fingerprint not returned): the
  // first matched the stored fingerprint.
  if (!dup.fingerprint.equals(first.fingerprint)) return { kind: 'decided', outcome: { kind: 'mismatch' } };
  return firstRaw;
}

function decide(row: ClaimRow, fingerprint: Buffer): ClaimOutcome | null {
  switch (row.state) {
    case 'outcome_unknown':
      // Set by this very claim (fingerprint matched) or found so.
      if (row.fingerprint != null && !fingerprint.equals(toBuffer(row.fingerprint)!)) return { kind: 'mismatch' };
      return { kind: 'outcome_unknown' };
    case 'in_flight':
      if (!fingerprint.equals(toBuffer(row.fingerprint)!)) return { kind: 'mismatch' };
      // Lease over, yet not taken over by this claim: a stale snapshot of a
      // row a concurrent claim just changed (see the claim statement).
      if (row.lease_over === true) return null;
      return { kind: 'in_flight', retryAfterS: row.retry_after_s ?? 1 };
    case 'complete': {
      if (!fingerprint.equals(toBuffer(row.fingerprint)!)) return { kind: 'mismatch' };
      return row.ttl_left_ms === null
        ? { kind: 'complete', response: toStored(row) }
        : { kind: 'complete', response: toStored(row), ttlLeftMs: Number(row.ttl_left_ms) };
    }
    default:
      return null;
  }
}

function toStored(row: ClaimRow): StoredResponse {
  return {
    status: row.status_code ?? 502,
    headers: row.response_headers ?? [],
    body: toBuffer(row.response_body) ?? EMPTY,
    bodyRetained: row.body_retained ?? true,
    bodySize: row.body_size == null ? 0 : Number(row.body_size),
    trace: row.trace_context ?? null,
  };
}
