// releaseOn with status classes: `5xx` releases every 500–599 answer (the key
// is free, the retry runs again), statuses outside the class stay bound; bad
// entries are config errors naming the entry.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';

const YAML = `
defaults:
  tenant: { constant: t }
routes:
  - name: classes
    match: { path: /c/** }
    releaseOn: [5xx, 429]
`;

const load = (releaseOn: string) =>
  loadConfig({ text: `defaults:\n  releaseOn: ${releaseOn}\n`, flags: { upstream: 'http://127.0.0.1:9', databaseUrl: null }, env: {} });

describe('releaseOn: status classes', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  /** The status the upstream answers next, per path: the first of the list, then the rest. */
  const script = new Map<string, number[]>();
  const post = (path: string, key: string): Promise<Reply> =>
    send(`${proxy.url}${path}`, { headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: '{"n":1}' });
  const hits = (path: string): number => upstream.received.filter((r) => r.url === path).length;

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream((req, n, res) => {
      const list = script.get(req.url!) ?? [];
      const status = list.length > 1 ? list.shift()! : (list[0] ?? 201);
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ execution: n, status }));
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML });
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  for (const status of [500, 502, 503, 599, 429]) {
    test(`${status} is released: the retry runs again and its 201 is what is kept`, async () => {
      const path = `/c/released-${status}`;
      script.set(path, [status, 201]);
      assert.equal((await post(path, `k-${status}`)).status, status);
      const retry = await post(path, `k-${status}`);
      assert.equal(retry.status, 201);
      assert.equal(retry.headers['idempotent-replayed'], undefined);
      const third = await post(path, `k-${status}`);
      assert.equal(third.headers['idempotent-replayed'], 'true');
      assert.equal(hits(path), 2);
    });
  }

  for (const status of [499, 400, 422, 201]) {
    test(`${status} is outside every listed class: stored and replayed`, async () => {
      const path = `/c/bound-${status}`;
      script.set(path, [status, 201]);
      assert.equal((await post(path, `b-${status}`)).status, status);
      const retry = await post(path, `b-${status}`);
      assert.equal(retry.status, status);
      assert.equal(retry.headers['idempotent-replayed'], 'true');
      assert.equal(hits(path), 1);
    });
  }

  test('config: classes lower-cased, numeric strings read as statuses, bad entries named', () => {
    assert.deepEqual(load('[5XX, "429", 401]').routes[0]!.releaseOn, ['5xx', 429, 401]);
    assert.throws(() => load('[6xx]'), /defaults\.releaseOn\[0\]: must be a status 100–599 or a status class such as 5xx \(got "6xx"\)/);
    assert.throws(() => load('[5xx, x]'), /defaults\.releaseOn\[1\]: must be a status 100–599 or a status class/);
    assert.throws(() => load('[99]'), /defaults\.releaseOn\[0\]: must be >= 100/);
  });
});
