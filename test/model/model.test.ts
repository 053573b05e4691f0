import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { commandArbitrary, finishClaim } from './commands.js';
import { emptyModel, heldClaims, slot, type KeyName, type Model, type Tenant } from './reference.js';
import { RealSystem } from './system.js';

// Model-based randomized test (fast-check): random interleavings of first
// requests, retries, other payloads, two tenants, held (in-flight) requests,
// SIGKILL of a spawned proxy, lease and retention expiries, and concurrent
// requests, across proxies sharing one database — checked command by
// command against the reference model of docs/contract.md's request rules (reference.ts).
// FC_RUNS=200 runs more; FC_SEED reproduces a run.

const RUNS = Number(process.env.FC_RUNS ?? 25);
const SEED = process.env.FC_SEED === undefined ? undefined : Number(process.env.FC_SEED);

async function checkStore(m: Model, r: RealSystem): Promise<void> {
  for (const t of ['ta', 'tb'] as Tenant[]) {
    for (const k of ['k0', 'k1', 'k2'] as KeyName[]) {
      const row = m.rows.get(slot(t, k));
      const [db] = await r.sql(`SELECT state, expires_at <= now() AS expired, convert_from(response_body, 'UTF8') AS body
        FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2`, [t, r.fullKey(k)]);
      const what = `store row ${t}/${k}`;
      if (row === undefined) {
        assert.equal(db, undefined, `${what}: the model has none`);
        continue;
      }
      assert.ok(db !== undefined, `${what}: missing`);
      assert.equal(db.expired, row.retentionExpired, `${what}: retention`);
      assert.equal(db.state, row.state === 'unknown' ? 'outcome_unknown' : row.state, what);
      if (row.state === 'complete') assert.equal(db.body, row.body, `${what}: committed body`);
    }
  }
}

/** fast-check keeps the failing assertion as `cause`; node:test shows only the message. */
async function assertWithCause(p: Promise<void>): Promise<void> {
  try {
    await p;
  } catch (err) {
    const cause = (err as { cause?: unknown }).cause;
    if (cause instanceof Error) (err as Error).message += `\n\nFirst failure: ${cause.message}`;
    throw err;
  }
}

describe('model-based: two proxies, one database, crashes and expiries', () => {
  let real: RealSystem;
  let run = 0;
  before(async () => { real = await RealSystem.start(); });
  after(async () => { await real?.close(); });

  test(`${RUNS} random command sequences agree with the reference model`, { timeout: 600_000 }, async () => {
    await assertWithCause(fc.assert(
      fc.asyncProperty(fc.commands([commandArbitrary()], { maxCommands: 30, size: 'max' }), async (cmds) => {
        real.prefix = `m${++run}-${Date.now().toString(36)}-`;
        const model = emptyModel();
        try {
          await fc.asyncModelRun(() => ({ model, real }), cmds);
          if (process.env.MODEL_LOG) console.log(String(cmds));
          // Let every held request finish, then the store must say what the model says.
          for (const claim of heldClaims(model)) await finishClaim(model, real, claim);
          await checkStore(model, real);
        } finally {
          // A failed run may leave requests held: answer them so nothing hangs.
          for (const p of real.pending.values()) p.exchange.respond(201, '{}');
          await Promise.all([...real.pending.values()].map((p) => p.reply));
          real.pending.clear();
        }
      }),
      { numRuns: RUNS, ...(SEED === undefined ? {} : { seed: SEED }), endOnFailure: true },
    ));
  });
});
