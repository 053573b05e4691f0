// Canonical fingerprints: key order, whitespace and excluded volatile fields
// do not change the fingerprint; under the default raw hashing they do (422).
// Non-JSON bodies on a canonical route are hashed raw.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { problemType } from './support.js';

const YAML = `
routes:
  - name: canonical
    match: { path: /canon/** }
    tenant: { constant: t }
    fingerprint: { json: canonical, exclude: [/timestamp, /meta/signature] }
  - name: raw
    match: { path: /raw/** }
    tenant: { constant: t }
`;

const JSON_CT = { 'content-type': 'application/json' };
const A = '{"amount":100,"currency":"eur","timestamp":"2024-05-01T10:00:00Z","meta":{"signature":"sig-1","source":"pos"},"items":[{"sku":"a","qty":1},{"sku":"b","qty":2}]}';
// Same document: other key order, whitespace, timestamp and meta.signature.
const A_AGAIN = `{
  "items": [ { "qty": 1, "sku": "a" }, { "qty": 2, "sku": "b" } ],
  "meta": { "source": "pos", "signature": "sig-2" },
  "timestamp": "2024-05-01T10:00:07Z",
  "currency": "eur",
  "amount": 100
}`;
const A_REORDERED = '{"currency":"eur","amount":100,"timestamp":"2024-05-01T10:00:00Z","meta":{"signature":"sig-1","source":"pos"},"items":[{"sku":"a","qty":1},{"sku":"b","qty":2}]}';

describe('fingerprint: { json: canonical, exclude }', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const post = (path: string, key: string, body: string, headers: Record<string, string> = JSON_CT) =>
    send(`${proxy.url}${path}`, { headers: { ...headers, 'idempotency-key': key }, body });

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201));
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML });
  });
  after(async () => {
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
  });

  test('key order, whitespace and excluded fields: the same operation, replayed', async () => {
    const first = await post('/canon/charges', 'c-1', A);
    const again = await post('/canon/charges', 'c-1', A_AGAIN);
    const reordered = await post('/canon/charges', 'c-1', A_REORDERED);
    assert.equal(first.status, 201);
    assert.equal(again.status, 201);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.deepEqual(again.body, first.body);
    assert.equal(reordered.headers['idempotent-replayed'], 'true');
    assert.equal(upstream.executions(), 1);
    // What the upstream ran is the first body, byte for byte (canonical form is only for hashing).
    assert.equal(upstream.received[0]!.body.toString(), A);
  });

  test('a change outside the excluded pointers is another payload: 422', async () => {
    await post('/canon/charges', 'c-2', A);
    const before = upstream.executions();
    const changes = [
      A.replace('"amount":100', '"amount":101'),
      A.replace('"source":"pos"', '"source":"web"'), // sibling of an excluded field
      A.replace('"qty":2', '"qty":3'),
      A.replace('[{"sku":"a","qty":1},{"sku":"b","qty":2}]', '[{"sku":"b","qty":2},{"sku":"a","qty":1}]'), // array order counts
      A.replace('"amount":100', '"amount":"100"'), // a string is not a number
      A.replace(',"timestamp":"2024-05-01T10:00:00Z"', ',"timestamp":"x","extra":true'),
    ];
    for (const body of changes) {
      const r = await post('/canon/charges', 'c-2', body);
      assert.equal(r.status, 422, body);
      assert.equal(problemType(r), 'key-mismatch');
    }
    assert.equal(upstream.executions(), before);
  });

  test('numbers beyond double precision are not collapsed into one fingerprint', async () => {
    await post('/canon/transfers', 'c-big', '{"to":"acct_1","amount":9007199254740993}');
    const r = await post('/canon/transfers', 'c-big', '{"amount":9007199254740992,"to":"acct_1"}');
    assert.equal(r.status, 422, 'two different amounts must not be the same operation');
    const tiny = await post('/canon/transfers', 'c-tiny', '{"rate":1e-400}');
    assert.equal(tiny.status, 201);
    const zero = await post('/canon/transfers', 'c-tiny', '{"rate":0}');
    assert.equal(zero.status, 422);
  });

  test('under the default raw hashing, key order or whitespace is a 422', async () => {
    const first = await post('/raw/charges', 'r-1', A);
    assert.equal(first.status, 201);
    const before = upstream.executions();
    const reordered = await post('/raw/charges', 'r-1', A_REORDERED);
    assert.equal(reordered.status, 422);
    assert.equal(problemType(reordered), 'key-mismatch');
    const spaced = await post('/raw/charges', 'r-1', A.replace(',', ', '));
    assert.equal(spaced.status, 422);
    const same = await post('/raw/charges', 'r-1', A);
    assert.equal(same.headers['idempotent-replayed'], 'true');
    assert.equal(upstream.executions(), before);
  });

  test('non-JSON bodies on a canonical route are hashed raw, without failing', async () => {
    const text = { 'content-type': 'text/plain' };
    const a = await post('/canon/notes', 'n-1', 'hello {"world"', text);
    const b = await post('/canon/notes', 'n-1', 'hello {"world"', text);
    const c = await post('/canon/notes', 'n-1', 'hello {"world"} ', text);
    assert.equal(a.status, 201);
    assert.equal(b.status, 201);
    assert.equal(b.headers['idempotent-replayed'], 'true');
    assert.equal(c.status, 422);
    // An empty body and a binary body also go through.
    const empty = await post('/canon/notes', 'n-2', '', text);
    assert.equal(empty.status, 201);
    const bin = await send(`${proxy.url}/canon/blob`, { headers: { 'content-type': 'application/octet-stream', 'idempotency-key': 'n-3' }, body: Buffer.from([0xff, 0xfe, 0x00, 0x7b]) });
    assert.equal(bin.status, 201);
    const binAgain = await send(`${proxy.url}/canon/blob`, { headers: { 'content-type': 'application/octet-stream', 'idempotency-key': 'n-3' }, body: Buffer.from([0xff, 0xfe, 0x00, 0x7b]) });
    assert.equal(binAgain.headers['idempotent-replayed'], 'true');
  });

  test('the fingerprint still covers method, path, query and content-type on a canonical route', async () => {
    await post('/canon/orders', 'm-1', A);
    const otherPath = await post('/canon/orders/2', 'm-1', A);
    assert.equal(otherPath.status, 422);
    const otherQuery = await post('/canon/orders?dry_run=1', 'm-1', A);
    assert.equal(otherQuery.status, 422);
    const otherType = await post('/canon/orders', 'm-1', A, { 'content-type': 'application/merge-patch+json' });
    assert.equal(otherType.status, 422);
  });
});
