// A small reference model of docs/contract.md's request rules for one (tenant, key): the row as the
// store holds it, who owns it, and what a request gets. The real proxies are
// checked against it command by command (model.test.ts).
//
// Executions are counted per claim: every claim that wins the key sends the
// request to the upstream exactly once. So per (tenant, key, retention
// window) there is one execution, plus one per lease-expiry takeover on a
// `reexecute` route — never more.

export type Tenant = 'ta' | 'tb';
export type KeyName = 'k0' | 'k1' | 'k2';
export type Payload = 'p' | 'q';
export type ProxyName = 'A' | 'B' | 'C';
export type RouteKind = 're' | 'fail';

/** k0, k1 on an onExpiredLease: reexecute route; k2 on an onExpiredLease: fail route. */
export const routeOf = (k: KeyName): RouteKind => (k === 'k2' ? 'fail' : 're');

export interface Row {
  /** The claim whose owner token the row carries. */
  owner: number;
  state: 'in_flight' | 'complete' | 'unknown';
  fp: Payload;
  leaseExpired: boolean;
  retentionExpired: boolean;
  /** The committed response body (complete only). */
  body: string | null;
}

export interface Claim {
  readonly id: number;
  readonly tenant: Tenant;
  readonly key: KeyName;
  readonly fp: Payload;
  readonly proxy: ProxyName;
  /** held: the upstream holds its answer; dead: its proxy was killed; done: answered. */
  status: 'held' | 'dead' | 'done';
}

export interface Model {
  readonly rows: Map<string, Row>;
  readonly claims: Map<number, Claim>;
  /** Upstream executions per tenant/key, as the model allows them. */
  readonly executions: Map<string, number>;
  nextClaim: number;
}

export const slot = (t: Tenant, k: KeyName): string => `${t}/${k}`;

export function emptyModel(): Model {
  return { rows: new Map(), claims: new Map(), executions: new Map(), nextClaim: 1 };
}

export type Prediction =
  | { readonly kind: 'execute' } // claimed (fresh, new retention window, or takeover): goes to the upstream
  | { readonly kind: 'replay'; readonly body: string }
  | { readonly kind: 'conflict' } // 409 in-flight
  | { readonly kind: 'unknown' } // 409 outcome-unknown
  | { readonly kind: 'mismatch' }; // 422

/** What a request gets, in the contract's order: claimable, mismatch, in flight, outcome unknown, complete. */
export function predict(m: Model, t: Tenant, k: KeyName, fp: Payload): Prediction {
  const row = m.rows.get(slot(t, k));
  if (row === undefined) return { kind: 'execute' };
  // Past its retention the key is new again — unless it is in flight with a
  // live lease: a call that outlasts its ttl still holds the key.
  const stillInUse = row.state === 'in_flight' && !row.leaseExpired;
  if (row.retentionExpired && !stillInUse) return { kind: 'execute' };
  if (row.fp !== fp) return { kind: 'mismatch' };
  switch (row.state) {
    case 'in_flight':
      if (!row.leaseExpired) return { kind: 'conflict' };
      return routeOf(k) === 're' ? { kind: 'execute' } : { kind: 'unknown' };
    case 'unknown':
      return { kind: 'unknown' };
    case 'complete':
      return { kind: 'replay', body: row.body! };
  }
}

/** Applies a request's effect on the row (a claim, or a fail-route lease expiry turning outcome_unknown). */
export function apply(m: Model, t: Tenant, k: KeyName, fp: Payload, proxy: ProxyName, p: Prediction): Claim | null {
  if (p.kind === 'unknown') {
    const row = m.rows.get(slot(t, k));
    if (row !== undefined && row.state === 'in_flight') row.state = 'unknown';
    return null;
  }
  if (p.kind !== 'execute') return null;
  const claim: Claim = { id: m.nextClaim++, tenant: t, key: k, fp, proxy, status: 'held' };
  m.claims.set(claim.id, claim);
  m.rows.set(slot(t, k), { owner: claim.id, state: 'in_flight', fp, leaseExpired: false, retentionExpired: false, body: null });
  m.executions.set(slot(t, k), (m.executions.get(slot(t, k)) ?? 0) + 1);
  return claim;
}

/**
 * The claim's upstream answered: its commit succeeds only while the row still
 * carries its owner token and is in flight (fencing). Returns whether the
 * client gets the complete response.
 */
export function finish(m: Model, claim: Claim, body: string): boolean {
  claim.status = 'done';
  const row = m.rows.get(slot(claim.tenant, claim.key));
  if (row === undefined || row.owner !== claim.id || row.state !== 'in_flight') return false;
  row.state = 'complete';
  row.body = body;
  return true;
}

export function heldClaims(m: Model, proxy?: ProxyName): Claim[] {
  return [...m.claims.values()].filter((c) => c.status === 'held' && (proxy === undefined || c.proxy === proxy));
}
