import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync, gunzipSync } from 'node:zlib';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { assertProblem, header, uniqueKey } from './support.js';

// docs/contract.md, step 7 and Storage: replays are byte-identical in status, body and stored
// headers, carry Idempotent-Replayed: true, and never call the upstream.

const PATTERN = Buffer.from([0x00, 0x01, 0x00, 0xff, 0xfe, 0x0d, 0x0a, 0x00, 0x1f, 0x8b, 0x80, 0x00]);
const BINARY = Buffer.concat([PATTERN, PATTERN, PATTERN, PATTERN]); // 48 bytes
const GZIPPED = gzipSync(Buffer.from(JSON.stringify({ ok: true, text: 'compressed body '.repeat(20) })));
const ORIGINAL_DATE = 'Mon, 01 Jan 2001 00:00:00 GMT';

const yaml = `
routes:
  - name: cookies
    match: { path: "/cookies/**" }
    storeHeaders: [set-cookie]
  - name: dropping
    match: { path: "/drop/**" }
    dropHeaders: [x-custom]
  - name: small
    match: { path: "/small/**" }
    maxStoredResponseBytes: 16
  - name: rest
    match: { path: "/**" }
`;

describe('replays', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream((req, n, res) => {
      res.setHeader('date', ORIGINAL_DATE);
      res.setHeader('x-request-id', `upstream-${n}`);
      res.setHeader('x-custom', `custom-${n}`);
      res.setHeader('set-cookie', [`session=s${n}; HttpOnly`, `csrf=c${n}; Secure`, `third=t${n}`]);
      res.setHeader('cache-control', 'no-store');
      if (req.url.endsWith('/gzip')) {
        res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip', 'content-length': GZIPPED.length });
        res.end(GZIPPED);
      } else if (req.url.endsWith('/empty')) {
        res.writeHead(204);
        res.end();
      } else if (req.url.endsWith('/chunked')) {
        res.writeHead(202, { 'content-type': 'application/octet-stream' });
        res.write(BINARY.subarray(0, 5));
        setTimeout(() => res.end(BINARY.subarray(5)), 20);
      } else {
        res.writeHead(201, { 'content-type': 'application/octet-stream' });
        res.end(BINARY);
      }
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  async function twice(path: string): Promise<{ first: Reply; replay: Reply; key: string }> {
    const key = uniqueKey('r');
    const opts = { headers: { 'idempotency-key': key, 'content-type': 'text/plain' }, body: 'pay 1' };
    const before = upstream.executions();
    const first = await send(`${proxy.url}${path}`, opts);
    assert.equal(upstream.executions(), before + 1);
    assert.equal(first.headers['idempotent-replayed'], undefined);
    const replay = await send(`${proxy.url}${path}`, opts);
    assert.equal(upstream.executions(), before + 1, 'the replay did not call the upstream');
    assert.equal(header(replay, 'idempotent-replayed'), 'true');
    assert.equal(replay.status, first.status);
    assert.ok(replay.body.equals(first.body), 'body byte for byte');
    return { first, replay, key };
  }

  test('binary body with NUL bytes replays byte for byte', async () => {
    const { first, replay } = await twice('/pay/bin');
    assert.equal(first.status, 201);
    assert.ok(first.body.equals(BINARY));
    assert.ok(replay.body.equals(BINARY));
    assert.equal(header(replay, 'content-type'), 'application/octet-stream');
    assert.equal(header(replay, 'content-length'), String(BINARY.length));
    assert.match(header(first, 'x-custom')!, /^custom-\d+$/);
    assert.equal(header(replay, 'x-custom'), header(first, 'x-custom'), 'a stored header is the original value');
    assert.equal(header(replay, 'cache-control'), 'no-store');
  });

  test('a gzip body with content-encoding replays compressed, byte for byte', async () => {
    const { first, replay } = await twice('/pay/gzip');
    assert.ok(first.body.equals(GZIPPED));
    assert.ok(replay.body.equals(GZIPPED));
    assert.equal(header(replay, 'content-encoding'), 'gzip');
    assert.equal(JSON.parse(gunzipSync(replay.body).toString()).ok, true);
  });

  test('a chunked upstream body (no content-length) replays whole', async () => {
    const { first, replay } = await twice('/pay/chunked');
    assert.equal(first.status, 202);
    assert.ok(replay.body.equals(BINARY));
  });

  test('204 without a body replays as 204', async () => {
    const { first, replay } = await twice('/pay/empty');
    assert.equal(first.status, 204);
    assert.equal(replay.status, 204);
    assert.equal(replay.body.length, 0);
    // RFC 9110 §8.6: no Content-Length in a 204, on the replay either.
    assert.equal(first.headers['content-length'], undefined);
    assert.equal(replay.headers['content-length'], undefined);
  });

  test('Date and per-request ids are not replayed from the original; Set-Cookie dropped by default', async () => {
    const { first, replay, key } = await twice('/pay/ids');
    assert.equal(header(first, 'date'), ORIGINAL_DATE);
    assert.notEqual(header(replay, 'date'), ORIGINAL_DATE);
    assert.match(header(first, 'x-request-id')!, /^upstream-/);
    assert.doesNotMatch(header(replay, 'x-request-id')!, /^upstream-/);
    assert.deepEqual(first.headers['set-cookie']?.length, 3, 'the first answer has every cookie');
    assert.equal(replay.headers['set-cookie'], undefined, 'cookies are per response by default');
    const [row] = await sql<{ response_headers: Array<[string, string]> }>(db.url,
      'SELECT response_headers FROM idempotency_keys WHERE idem_key = $1', [key]);
    const names = row!.response_headers.map(([n]) => n);
    for (const n of ['date', 'x-request-id', 'set-cookie', 'content-length']) assert.ok(!names.includes(n), `${n} not stored`);
    assert.ok(names.includes('x-custom'));
  });

  test('storeHeaders: [set-cookie] keeps several Set-Cookie lines several', async () => {
    const { first, replay } = await twice('/cookies/a');
    const cookies = first.headers['set-cookie'] as string[];
    assert.equal(cookies.length, 3);
    assert.deepEqual(replay.headers['set-cookie'], cookies);
  });

  test('dropHeaders removes a header from the stored set', async () => {
    const { first, replay } = await twice('/drop/a');
    assert.ok(header(first, 'x-custom'));
    assert.equal(header(replay, 'x-custom'), undefined);
  });

  test('a body over maxStoredResponseBytes: full to the first client, a body-not-retained problem on replay', async () => {
    const { first, replay } = await (async () => {
      const key = uniqueKey('big');
      const opts = { headers: { 'idempotency-key': key }, body: 'x' };
      const before = upstream.executions();
      const first = await send(`${proxy.url}/small/a`, opts);
      const replay = await send(`${proxy.url}/small/a`, opts);
      assert.equal(upstream.executions(), before + 1);
      return { first, replay };
    })();
    assert.ok(first.body.equals(BINARY));
    assert.equal(replay.status, 201, 'the original status');
    assert.equal(header(replay, 'idempotent-replayed'), 'true');
    const p = assertProblem({ ...replay, status: 201 }, 'body-not-retained', 201);
    assert.equal(p.originalBodyBytes, BINARY.length);
  });
});
