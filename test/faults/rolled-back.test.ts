import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import type { RunningProxy } from '../../src/app.js';
import { GiveBacks } from '../../src/lifecycle/give-back.js';
import { createLogger } from '../../src/log/logger.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { createPgDb } from '../../src/store/db/pg.js';
import { KeyStore } from '../../src/store/key-store.js';
import { createTestDatabase, row, sql, whileRefusing, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { startTestProxy, type LogLine } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { waitFor } from '../helpers/wait.js';

// PostgreSQL rolls a statement back to break a deadlock (40P01) or a serialization conflict (40001): errors that
// say the same statement may simply be sent again. Each of the key's own statements after the claim is:
// - the commit, after the upstream has run: tried again, as after a store outage, within its patience; the client
//   gets its answer, and the record replays. Cut on the first refusal, the client got no complete response and the
//   key stayed in flight until its lease ended; on a `reexecute` route its retry then ran the operation again.
// - the release (a `releaseOn` status) and a claim given back (src/lifecycle/give-back.ts): tried again in the
//   background. Given up at once, the key stayed in flight until its lease ended: every retry got 409.
// - a claim that took nothing (a takeover's, here): claimed again at once. It was answered 500.
//
// PostgreSQL refuses for real: a trigger in this test's own database raises the code on the key's first such
// statement (test/helpers/db.ts, whileRefusing).

let db: TestDatabase;
let up: TestUpstream;
let proxy: RunningProxy;

before(async () => {
  db = await createTestDatabase();
  // A key named release-…: 429 (releaseOn's default) the first time, then 201.
  up = await startUpstream(async (req, n, res) => {
    const first = up.received.filter((r) => r.url === req.url).length === 1;
    if (req.url.includes('/release-') && first) {
      res.writeHead(429, { 'content-type': 'application/json' }).end('{"error":"slow down"}');
      return;
    }
    await jsonResponder(201)(req, n, res);
  });
  proxy = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: 'routes: [{ name: pay, match: { path: "/pay/**" } }]\n' });
});
after(async () => {
  await proxy?.close();
  await up?.close();
  await db?.drop();
});

const post = (key: string): Promise<Reply> =>
  send(`${proxy.url}/pay/${key}`, { headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{"amount":100}' });

for (const [what, code] of [['deadlock_detected', '40P01'], ['serialization_failure', '40001']] as const) {
  test(`a commit PostgreSQL rolls back once (${what}, ${code}) is tried again: the client gets its answer, the record replays, one execution`, async () => {
    const key = `conflict-${code}-${Date.now()}`;
    await whileRefusing(db.url, { code, when: `OLD.idem_key = '${key}' AND NEW.state = 'complete'`, once: true }, async (tries) => {
      const first = await post(key);
      assert.equal(first.status, 201, `${first.status} ${first.text()}`);
      assert.equal(await tries(), 2, 'the commit was refused once, then tried again');
      assert.equal((await row(db.url, key))?.state, 'complete');
      const again = await post(key);
      assert.equal(again.headers['idempotent-replayed'], 'true');
      assert.equal(again.text(), first.text());
      assert.equal(up.received.filter((r) => r.url === `/pay/${key}`).length, 1, 'one execution');
    });
  });
}

test('a release PostgreSQL rolls back once is tried again in the background: the key is freed, its retry runs', async () => {
  const key = `release-${Date.now()}`;
  await whileRefusing(db.url, { code: '40P01', when: `OLD.idem_key = '${key}'`, once: true, on: 'DELETE' }, async (tries) => {
    const first = await post(key);
    assert.equal(first.status, 429, 'the client gets the upstream\'s answer at once');
    await waitFor('the key to be released', async () => (await row(db.url, key)) === undefined, 5000);
    assert.equal(await tries(), 2, 'the release was refused once, then tried again');
  });
  const retry = await post(key);
  assert.equal(retry.status, 201, `the retry runs: ${retry.status} ${retry.text()}`);
  assert.equal(up.received.filter((r) => r.url === `/pay/${key}`).length, 2);
});

test('a claim given back, its statement rolled back once by PostgreSQL, is tried again: the key is freed', async () => {
  const pgdb = createPgDb({ connectionString: db.url, max: 2, timeoutMs: 2000 });
  const store = new KeyStore(pgdb);
  const lines: LogLine[] = [];
  const giveBacks = new GiveBacks(store, null, createLogger('info', { write: (s: string) => void lines.push(JSON.parse(s) as LogLine) }),
    createMetrics({ processMetrics: false }));
  const claim = {
    tenantId: '', key: `given-back-${Date.now()}`, fingerprint: Buffer.alloc(32, 3), ownerToken: randomUUID(), leaseMs: 60_000, ttlMs: 3_600_000,
    onExpiredLease: 'fail' as const, route: 'pay', method: 'POST', path: '/pay',
  };
  try {
    assert.equal((await store.claim(claim)).kind, 'claimed');
    await whileRefusing(db.url, { code: '40001', when: `OLD.idem_key = '${claim.key}'`, once: true, on: 'DELETE' }, async (tries) => {
      giveBacks.add('req', claim, 'abandon');
      await waitFor('the claim to be given back', async () => (await row(db.url, claim.key)) === undefined, 5000);
      assert.equal(await tries(), 2, 'the statement was refused once, then tried again');
    });
    assert.ok(lines.some((l) => l.msg === 'a claim whose reply was lost was given back once the store answered'), JSON.stringify(lines));
  } finally {
    giveBacks.close();
    await pgdb.close();
  }
});

test('a claim PostgreSQL rolls back once, nothing taken (the takeover of an expired lease), is claimed again: the request runs', async () => {
  const key = `takeover-${Date.now()}`;
  assert.equal((await post(key)).status, 201);
  // Back in flight under another token with its lease over, as a proxy that died mid-request leaves it.
  await sql(db.url, `UPDATE idempotency_keys SET state = 'in_flight', owner_token = gen_random_uuid(), locked_until = now() - interval '1 second',
    completed_at = NULL, status_code = NULL, response_headers = NULL, response_body = NULL, body_retained = NULL, body_size = NULL,
    trace_context = NULL WHERE idem_key = $1`, [key]);
  await whileRefusing(db.url, { code: '40P01', when: `OLD.idem_key = '${key}' AND OLD.locked_until < now()`, once: true }, async (tries) => {
    const again = await post(key);
    assert.equal(again.status, 201, `the takeover, claimed again, runs: ${again.status} ${again.text()}`);
    assert.equal(await tries(), 2, 'the takeover was refused once, then sent again');
  });
  assert.equal(up.received.filter((r) => r.url === `/pay/${key}`).length, 2, 'the dead holder\'s run and the takeover\'s (onExpiredLease: reexecute)');
});
