import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, row, whileRefusing, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';

// The upstream has run; PostgreSQL then rolls the commit back to break a deadlock (40P01) or a serialization
// conflict (40001): errors that say the same statement may simply be tried again. The commit is tried again, as
// after a store outage, within its patience: the client gets its answer, and the record replays. Cut on the first
// refusal, the client got no complete response and the key stayed in flight until its lease ended; on a
// `reexecute` route its retry then ran the operation a second time.
//
// PostgreSQL refuses for real: a trigger in this test's own database raises the code on the key's first commit
// (test/helpers/db.ts, whileRefusing).

let db: TestDatabase;
let up: TestUpstream;
let proxy: RunningProxy;

before(async () => {
  db = await createTestDatabase();
  up = await startUpstream();
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
