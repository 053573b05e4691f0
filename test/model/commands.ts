import assert from 'node:assert/strict';
import { PROBLEM_BASE } from '../../src/http/problems.js';
import fc from 'fast-check';
import type { Reply } from '../helpers/http.js';
import {
  apply, finish, heldClaims, predict, slot,
  type Claim, type KeyName, type Model, type Payload, type Prediction, type ProxyName, type Tenant,
} from './reference.js';
import type { RealSystem } from './system.js';

// The commands fast-check interleaves. Each one predicts with the reference
// model, acts on the real system, and checks the answer and the upstream
// executions of the key it touched.

type Cmd = fc.AsyncCommand<Model, RealSystem>;
const STEP_TIMEOUT_MS = 10_000;

function within<T>(p: Promise<T>, what: string): Promise<T> {
  let t: NodeJS.Timeout;
  return Promise.race([p, new Promise<T>((_, reject) => { t = setTimeout(() => reject(new Error(`no answer within ${STEP_TIMEOUT_MS} ms: ${what}`)), STEP_TIMEOUT_MS); })])
    .finally(() => clearTimeout(t));
}

function expectAnswer(p: Prediction, r: Reply | Error, what: string): void {
  assert.ok(!(r instanceof Error), `${what}: network failure ${(r as Error).message}`);
  const replayed = r.headers['idempotent-replayed'] === 'true';
  switch (p.kind) {
    case 'execute':
      assert.deepEqual([r.status, replayed], [201, false], `${what}: expected a fresh execution, got ${r.status} ${r.text()}`);
      return;
    case 'replay':
      assert.deepEqual([r.status, replayed], [201, true], `${what}: expected a replay, got ${r.status} ${r.text()}`);
      assert.equal(r.text(), p.body, `${what}: the replay must be the committed response byte for byte`);
      return;
    case 'conflict':
      assert.equal(r.status, 409, `${what}: expected 409 in-flight, got ${r.status} ${r.text()}`);
      assert.equal(r.json().type, `${PROBLEM_BASE}in-flight`);
      assert.ok(Number(r.headers['retry-after']) >= 1);
      return;
    case 'unknown':
      assert.equal(r.status, 409, `${what}: expected 409 outcome-unknown, got ${r.status} ${r.text()}`);
      assert.equal(r.json().type, `${PROBLEM_BASE}outcome-unknown`);
      return;
    case 'mismatch':
      assert.equal(r.status, 422, `${what}: expected 422, got ${r.status} ${r.text()}`);
      assert.equal(r.json().type, `${PROBLEM_BASE}key-mismatch`);
  }
}

function expectExecutions(m: Model, r: RealSystem, t: Tenant, k: KeyName, what: string): void {
  assert.equal(r.executions(t, k), m.executions.get(slot(t, k)) ?? 0,
    `${what}: upstream executions of ${t}/${k} differ from the model (one per claim epoch)`);
}

/** A request whose upstream answers at once (first request, retry, other payload, other tenant). */
class SendCmd implements Cmd {
  constructor(readonly proxy: 'A' | 'B', readonly t: Tenant, readonly k: KeyName, readonly fp: Payload) {}
  check = (): boolean => true;
  async run(m: Model, r: RealSystem): Promise<void> {
    const what = this.toString();
    const p = predict(m, this.t, this.k, this.fp);
    const reply = await within(r.request(await r.url(this.proxy), this.t, this.k, this.fp, false).reply, what);
    expectAnswer(p, reply, what);
    const claim = apply(m, this.t, this.k, this.fp, this.proxy, p);
    if (claim !== null) assert.ok(finish(m, claim, (reply as Reply).text()), `${what}: the model lost its own claim`);
    expectExecutions(m, r, this.t, this.k, what);
  }
  toString = (): string => `send(${this.proxy}, ${this.t}/${this.k}, ${this.fp})`;
}

/** A request whose upstream holds its answer: the key stays in flight until finish or crash. */
class StartHeldCmd implements Cmd {
  constructor(readonly proxy: ProxyName, readonly t: Tenant, readonly k: KeyName, readonly fp: Payload) {}
  check = (): boolean => true;
  async run(m: Model, r: RealSystem): Promise<void> {
    const what = this.toString();
    const p = predict(m, this.t, this.k, this.fp);
    const { id, reply } = r.request(await r.url(this.proxy), this.t, this.k, this.fp, true);
    const arrival = r.up.arrival((e) => e.headers['x-model-req'] === id, STEP_TIMEOUT_MS);
    const first = await within(Promise.race([arrival.then((ex) => ({ ex })), reply.then((rep) => ({ rep }))]), what);
    if (p.kind === 'execute') {
      assert.ok('ex' in first, `${what}: expected the request to reach the upstream, got ${'rep' in first ? describe(first.rep) : ''}`);
      const claim = apply(m, this.t, this.k, this.fp, this.proxy, p)!;
      r.pending.set(claim.id, { exchange: first.ex, reply });
    } else {
      arrival.catch(() => {});
      assert.ok('rep' in first, `${what}: expected ${p.kind}, but the request reached the upstream`);
      expectAnswer(p, first.rep, what);
      apply(m, this.t, this.k, this.fp, this.proxy, p);
    }
    expectExecutions(m, r, this.t, this.k, what);
  }
  toString = (): string => `startHeld(${this.proxy}, ${this.t}/${this.k}, ${this.fp})`;
}

function describe(r: Reply | Error): string {
  return r instanceof Error ? r.message : `${r.status} ${r.text()}`;
}

/** The upstream answers a held request: committed if the claim still owns the row, else fenced. */
export async function finishClaim(m: Model, r: RealSystem, claim: Claim): Promise<void> {
  const what = `finish(#${claim.id} ${claim.tenant}/${claim.key} on ${claim.proxy})`;
  const pending = r.pending.get(claim.id)!;
  r.pending.delete(claim.id);
  const body = JSON.stringify({ n: pending.exchange.n, held: true });
  pending.exchange.respond(201, body);
  const reply = await within(pending.reply, what);
  if (finish(m, claim, body)) {
    assert.ok(!(reply instanceof Error), `${what}: committed, so the client must get its answer (${describe(reply)})`);
    assert.deepEqual([reply.status, reply.text(), reply.headers['idempotent-replayed']], [201, body, undefined], what);
  } else {
    assert.ok(reply instanceof Error, `${what}: fenced out (lease taken over or retention expired), so the client must never get a complete response; got ${describe(reply)}`);
  }
  expectExecutions(m, r, claim.tenant, claim.key, what);
}

class FinishCmd implements Cmd {
  constructor(readonly pick: number) {}
  check = (m: Readonly<Model>): boolean => heldClaims(m as Model).length > 0;
  async run(m: Model, r: RealSystem): Promise<void> {
    const held = heldClaims(m);
    await finishClaim(m, r, held[this.pick % held.length]!);
  }
  toString = (): string => `finish(${this.pick})`;
}

/** SIGKILL of proxy C while it holds keys: they stay in flight until their lease ends. */
class CrashCCmd implements Cmd {
  check = (m: Readonly<Model>): boolean => heldClaims(m as Model, 'C').length > 0;
  async run(m: Model, r: RealSystem): Promise<void> {
    await r.killC();
    for (const claim of heldClaims(m, 'C')) {
      claim.status = 'dead';
      const pending = r.pending.get(claim.id)!;
      r.pending.delete(claim.id);
      const reply = await within(pending.reply, 'crashed request');
      assert.ok(reply instanceof Error, `a request on a killed proxy cannot have been answered (${describe(reply)})`);
      await pending.exchange.closed;
    }
  }
  toString = (): string => 'crashC()';
}

/** The lease runs out (as after a crash, or a proxy paused past its lease): time travel in the database. */
class ExpireLeaseCmd implements Cmd {
  constructor(readonly t: Tenant, readonly k: KeyName) {}
  check = (m: Readonly<Model>): boolean => {
    const row = m.rows.get(slot(this.t, this.k));
    return row !== undefined && row.state === 'in_flight' && !row.leaseExpired;
  };
  async run(m: Model, r: RealSystem): Promise<void> {
    const rows = await r.sql(`UPDATE idempotency_keys SET locked_until = now() - interval '1 millisecond'
      WHERE tenant_id = $1 AND idem_key = $2 AND state = 'in_flight' RETURNING 1`, [this.t, r.fullKey(this.k)]);
    assert.equal(rows.length, 1, `${this.toString()}: the model says the row is in flight`);
    m.rows.get(slot(this.t, this.k))!.leaseExpired = true;
  }
  toString = (): string => `expireLease(${this.t}/${this.k})`;
}

/** The retention window ends: the key may be used again (a new window). */
class ExpireRetentionCmd implements Cmd {
  constructor(readonly t: Tenant, readonly k: KeyName) {}
  check = (m: Readonly<Model>): boolean => {
    const row = m.rows.get(slot(this.t, this.k));
    return row !== undefined && !row.retentionExpired;
  };
  async run(m: Model, r: RealSystem): Promise<void> {
    const rows = await r.sql(`UPDATE idempotency_keys SET expires_at = now() - interval '1 millisecond'
      WHERE tenant_id = $1 AND idem_key = $2 RETURNING 1`, [this.t, r.fullKey(this.k)]);
    assert.equal(rows.length, 1, `${this.toString()}: the model says the row exists`);
    m.rows.get(slot(this.t, this.k))!.retentionExpired = true;
  }
  toString = (): string => `expireRetention(${this.t}/${this.k})`;
}

/** The same key on A and B at the same moment: at most one of them executes. */
class RaceCmd implements Cmd {
  constructor(readonly t: Tenant, readonly k: KeyName, readonly fpA: Payload, readonly fpB: Payload) {}
  check = (): boolean => true;
  async run(m: Model, r: RealSystem): Promise<void> {
    const what = this.toString();
    const pa = predict(m, this.t, this.k, this.fpA);
    const pb = predict(m, this.t, this.k, this.fpB);
    const [ra, rb] = await within(Promise.all([
      r.request(r.a.url, this.t, this.k, this.fpA, false).reply,
      r.request(r.b.url, this.t, this.k, this.fpB, false).reply,
    ]), what);
    if (pa.kind !== 'execute' && pb.kind !== 'execute') {
      expectAnswer(pa, ra, `${what} A`);
      expectAnswer(pb, rb, `${what} B`);
      apply(m, this.t, this.k, this.fpA, 'A', pa);
      apply(m, this.t, this.k, this.fpB, 'B', pb);
    } else {
      const fresh = (x: Reply | Error): boolean => !(x instanceof Error) && x.status === 201 && x.headers['idempotent-replayed'] === undefined;
      assert.equal(Number(fresh(ra)) + Number(fresh(rb)), 1, `${what}: exactly one of the two must execute (A: ${describe(ra)}, B: ${describe(rb)})`);
      const [winFp, winName, winReply, loseFp, loseReply, winP] = fresh(ra)
        ? [this.fpA, 'A' as const, ra as Reply, this.fpB, rb, pa]
        : [this.fpB, 'B' as const, rb as Reply, this.fpA, ra, pb];
      assert.equal(winP.kind, 'execute', `${what}: ${winName} executed, but the model says it could not claim the key`);
      const claim = apply(m, this.t, this.k, winFp, winName, winP)!;
      finish(m, claim, winReply.text());
      if (loseFp === winFp) {
        assert.ok(!(loseReply instanceof Error));
        if (loseReply.status === 409) expectAnswer({ kind: 'conflict' }, loseReply, `${what} loser`);
        else expectAnswer({ kind: 'replay', body: winReply.text() }, loseReply, `${what} loser`);
      } else {
        expectAnswer({ kind: 'mismatch' }, loseReply, `${what} loser`);
      }
    }
    expectExecutions(m, r, this.t, this.k, what);
  }
  toString = (): string => `race(${this.t}/${this.k}, A:${this.fpA}, B:${this.fpB})`;
}

// Skewed towards few slots, so that commands on one key meet often
// (takeover then a late finish needs four of them on the same key).
const tenant = fc.oneof({ arbitrary: fc.constant<Tenant>('ta'), weight: 3 }, { arbitrary: fc.constant<Tenant>('tb'), weight: 1 });
const key = fc.oneof(
  { arbitrary: fc.constant<KeyName>('k0'), weight: 5 },
  { arbitrary: fc.constant<KeyName>('k1'), weight: 1 },
  { arbitrary: fc.constant<KeyName>('k2'), weight: 2 },
);
const payload = fc.oneof({ arbitrary: fc.constant<Payload>('p'), weight: 4 }, { arbitrary: fc.constant<Payload>('q'), weight: 1 });

export function commandArbitrary(): fc.Arbitrary<Cmd> {
  return fc.oneof(
    { arbitrary: fc.tuple(fc.constantFrom<'A' | 'B'>('A', 'B'), tenant, key, payload).map(([p, t, k, f]) => new SendCmd(p, t, k, f)), weight: 6 },
    { arbitrary: fc.tuple(fc.constantFrom<'A' | 'B'>('A', 'B'), tenant, key, payload).map(([p, t, k, f]) => new StartHeldCmd(p, t, k, f)), weight: 3 },
    { arbitrary: fc.tuple(tenant, key, payload).map(([t, k, f]) => new StartHeldCmd('C', t, k, f)), weight: 2 },
    { arbitrary: fc.nat(10).map((n) => new FinishCmd(n)), weight: 3 },
    { arbitrary: fc.constant(new CrashCCmd()), weight: 2 },
    { arbitrary: fc.tuple(tenant, key).map(([t, k]) => new ExpireLeaseCmd(t, k)), weight: 4 },
    { arbitrary: fc.tuple(tenant, key).map(([t, k]) => new ExpireRetentionCmd(t, k)), weight: 1 },
    { arbitrary: fc.tuple(tenant, key, payload, payload).map(([t, k, a, b]) => new RaceCmd(t, k, a, b)), weight: 2 },
  );
}
