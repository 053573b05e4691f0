import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { runCli, spawnProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { assertProblem, header, uniqueKey } from './support.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { tempDir } from '../helpers/tmp.js';

// docs/contract.md, "What is bound to a key" (a crash): a proxy killed with SIGKILL while
// the upstream handles its request leaves an in_flight row. Retries (to a
// second proxy on the same database) get 409 until the lease ends; then
// onExpiredLease decides: reexecute (default) runs it again, fail turns the
// row into outcome_unknown (409 of its own until an operator purges it).
// Nothing stays stuck.

const LEASE_MS = 2000;

describe('a proxy killed mid-request', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let dir: ReturnType<typeof tempDir>;
  let a: SpawnedProxy;
  let b: SpawnedProxy;
  const hang = new Set<string>();
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(async (req, n, res) => {
      const key = req.headers['idempotency-key'] as string;
      if (hang.delete(key)) {
        // The crashed proxy's request: never answered; over when its connection goes.
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, 30_000).unref();
          res.once('close', () => { clearTimeout(t); resolve(); });
        });
      }
      if (res.destroyed) return;
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ execution: n, key }));
    });
    dir = tempDir();
    const file = dir.write('proxy.yaml', `
defaults:
  lease: ${LEASE_MS / 1000}s
  tenant: { constant: crash }
routes:
  - name: careful
    match: { path: "/careful/**" }
    onExpiredLease: fail
  - name: pay
    match: { path: "/**" }
`);
    const args = ['serve', '--config', file, '--upstream', upstream.url, '--database-url', db.url, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0'];
    [a, b] = await Promise.all([spawnProxy(args), spawnProxy(args)]);
  });
  after(async () => {
    await a?.kill();
    await b?.stop();
    await upstream.close();
    await db.drop();
    dir.remove();
  });

  test('409 until the lease ends, then reexecute (default) or outcome_unknown (fail); nothing stuck', async () => {
    const k1 = uniqueKey('crash');
    const k2 = uniqueKey('careful');
    hang.add(k1);
    hang.add(k2);
    const post = (p: SpawnedProxy, path: string, key: string): Promise<Reply> =>
      send(`${p.url}${path}`, { headers: { 'idempotency-key': key }, body: 'charge 10' });
    const lost = [post(a, '/pay', k1), post(a, '/careful/pay', k2)].map((p) => p.then(() => 'answered', () => 'lost'));
    await waitFor('the upstream to receive both', () => (upstream.executions() >= 2 ? true : undefined));
    await sleep(800); // let a heartbeat extend the lease once
    await a.kill();
    const killedAt = Date.now();
    assert.deepEqual(await Promise.all(lost), ['lost', 'lost']);
    assert.equal(upstream.executions(), 2);

    // Right after the crash the lease is live: 409 with Retry-After, no second execution.
    for (const [path, key] of [['/pay', k1], ['/careful/pay', k2]] as const) {
      const r = await post(b, path, key);
      assertProblem(r, 'in-flight', 409);
      const ra = Number(header(r, 'retry-after'));
      assert.ok(ra >= 1 && ra <= LEASE_MS / 1000, `Retry-After ${ra}`);
    }
    assert.equal(upstream.executions(), 2);

    // reexecute: retries get 409 until the lease ends, then the retry runs the operation.
    const executed = await waitFor('the default route to re-execute', async () => {
      const r = await post(b, '/pay', k1);
      if (r.status === 409) return undefined;
      return r;
    }, LEASE_MS + 3000, 100);
    const waited = Date.now() - killedAt;
    assert.ok(waited >= LEASE_MS - LEASE_MS / 3 - 200, `the lease held after the crash (re-executed after ${waited} ms)`);
    assert.equal(executed.status, 201);
    assert.equal(executed.headers['idempotent-replayed'], undefined);
    assert.equal(executed.json().key, k1);
    const replay = await post(b, '/pay', k1);
    assert.equal(header(replay, 'idempotent-replayed'), 'true');
    assert.ok(replay.body.equals(executed.body));
    const [row] = await sql<{ state: string; attempt: number }>(db.url, 'SELECT state, attempt FROM idempotency_keys WHERE idem_key = $1', [k1]);
    assert.deepEqual(row, { state: 'complete', attempt: 2 });

    // fail: after the lease, 409 outcome-unknown, never a second execution…
    const unknown = await post(b, '/careful/pay', k2);
    assertProblem(unknown, 'outcome-unknown', 409);
    assertProblem(await post(b, '/careful/pay', k2), 'outcome-unknown', 409);
    assert.equal(upstream.executions(), 3, 'only k1 ran again');
    // …until an operator resolves the key.
    const purge = await runCli(['keys', 'purge', '--database-url', db.url, '--tenant-id', 'crash', '--key', k2, '--yes']);
    assert.equal(purge.code, 0, purge.stderr);
    assert.match(purge.stdout, /outcome_unknown/);
    const after = await post(b, '/careful/pay', k2);
    assert.equal(after.status, 201);
    assert.equal(upstream.executions(), 4);
  });
});
