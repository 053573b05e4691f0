import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send, together, type Reply } from '../helpers/http.js';
import { spawnProxy, startTestProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { assertProblem, header, uniqueKey } from './support.js';
import { waitFor } from '../helpers/wait.js';

// docs/contract.md, step 5 (claim): 50 identical requests with one key at the same moment
// execute the upstream exactly once; every other answer is a 409 with
// Retry-After or the replay. In one process, then in two sharing a database.

const N = 50;
const BODY = JSON.stringify({ amount: 100, currency: 'EUR' });

function check(replies: Reply[], upstream: TestUpstream): void {
  assert.equal(upstream.executions(), 1, 'the upstream executed exactly once');
  const executed = replies.filter((r) => r.status === 201 && r.headers['idempotent-replayed'] === undefined);
  assert.equal(executed.length, 1, 'exactly one answer is the execution');
  const original = executed[0]!.body;
  for (const r of replies) {
    if (r === executed[0]) continue;
    if (r.status === 409) {
      assertProblem(r, 'in-flight', 409);
      const ra = Number(header(r, 'retry-after'));
      assert.ok(Number.isInteger(ra) && ra >= 1, `Retry-After ${header(r, 'retry-after')}`);
    } else {
      assert.equal(r.status, 201, r.text());
      assert.equal(header(r, 'idempotent-replayed'), 'true');
      assert.ok(r.body.equals(original), 'the replay is the original body');
    }
  }
}

describe('exactly once under concurrency', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201, 500));
  });
  after(async () => {
    await upstream.close();
    await db.drop();
  });

  test('one process: 50 at once, one execution, the rest 409 or replay', async () => {
    const proxy: RunningProxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url });
    try {
      upstream.received.length = 0;
      const key = uniqueKey('c1');
      const replies = await together(N, () => send(`${proxy.url}/orders`, {
        headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: BODY,
      }));
      check(replies, upstream);
      assert.ok(replies.some((r) => r.status === 409), 'the upstream is slow: some duplicates arrive while in flight');
      // After the first settles, every duplicate is a replay.
      const later = await together(10, () => send(`${proxy.url}/orders`, {
        headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: BODY,
      }));
      for (const r of later) assert.equal(header(r, 'idempotent-replayed'), 'true');
      assert.equal(upstream.executions(), 1);
    } finally {
      await proxy.close();
      upstream.received.length = 0;
    }
  });

  test('two processes on one database: 50 at once split between them, one execution', async () => {
    const args = ['serve', '--upstream', upstream.url, '--database-url', db.url, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0'];
    const procs: SpawnedProxy[] = await Promise.all([spawnProxy(args), spawnProxy(args)]);
    try {
      upstream.received.length = 0;
      const key = uniqueKey('c2');
      const replies = await together(N, (i) => send(`${procs[i % 2]!.url}/orders`, {
        headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: BODY,
      }));
      check(replies, upstream);
      // Both processes answered duplicates (409 or replay), not only the winner.
      for (const [i, p] of procs.entries()) {
        const mine = replies.filter((_, j) => j % 2 === i);
        assert.ok(mine.some((r) => r.status === 409 || header(r, 'idempotent-replayed') === 'true'), `process ${i} saw duplicates`);
        await waitFor('request log lines', () => p.lines.filter((l) => l.includes('"msg":"request"')).length >= N / 2 ? true : undefined);
      }
      const outcomes = procs.flatMap((p) => p.lines.filter((l) => l.includes('"msg":"request"')).map((l) => JSON.parse(l).outcome as string));
      assert.equal(outcomes.filter((o) => o === 'executed').length, 1);
      assert.equal(outcomes.length, N);
    } finally {
      const codes = await Promise.all(procs.map((p) => p.stop()));
      assert.deepEqual(codes, [0, 0], 'both exit cleanly on SIGTERM');
    }
  });
});
