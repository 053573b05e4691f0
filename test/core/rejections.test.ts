import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { assertProblem, header, uniqueKey } from './support.js';
import { rawPost, rawRequest } from '../helpers/raw-http.js';

// docs/contract.md, step 2 and Answers: the proxy's own rejections (400, 413, 422) never
// reach the upstream and never bind the key: the same key with a valid
// request executes afterwards. Every error is problem+json.

const yaml = `
routes:
  - name: required
    match: { path: "/req/**" }
    required: true
  - name: stripe
    match: { path: "/stripe/**" }
    mismatchStatus: 400
  - name: small
    match: { path: "/small/**" }
    maxBodyBytes: 1KiB
  - name: rest
    match: { path: "/**" }
`;

describe('rejections bind nothing and never reach the upstream', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201));
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  const rows = async (key: string): Promise<number> =>
    (await sql(db.url, 'SELECT 1 FROM idempotency_keys WHERE idem_key = $1', [key])).length;

  /** The key is free: a valid request with it executes (not a replay, not a 409). */
  async function executesAfterwards(path: string, key: string): Promise<void> {
    const before = upstream.executions();
    const r = await send(`${proxy.url}${path}`, { headers: { 'idempotency-key': key }, body: 'ok' });
    assert.equal(r.status, 201, r.text());
    assert.equal(r.headers['idempotent-replayed'], undefined);
    assert.equal(upstream.executions(), before + 1);
  }

  test('different payload under a used key → 422; the stored answer is untouched', async () => {
    const key = uniqueKey('mm');
    const first = await send(`${proxy.url}/pay`, { headers: { 'idempotency-key': key }, body: 'amount=1' });
    assert.equal(first.status, 201);
    const n = upstream.executions();
    assertProblem(await send(`${proxy.url}/pay`, { headers: { 'idempotency-key': key }, body: 'amount=2' }), 'key-mismatch', 422);
    // Also a different query, path or content-type is a different request.
    assertProblem(await send(`${proxy.url}/pay?x=1`, { headers: { 'idempotency-key': key }, body: 'amount=1' }), 'key-mismatch', 422);
    assertProblem(await send(`${proxy.url}/pay`, { headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: 'amount=1' }), 'key-mismatch', 422);
    assertProblem(await send(`${proxy.url}/pay`, { method: 'PATCH', headers: { 'idempotency-key': key }, body: 'amount=1' }), 'key-mismatch', 422);
    assert.equal(upstream.executions(), n);
    const replay = await send(`${proxy.url}/pay`, { headers: { 'idempotency-key': key }, body: 'amount=1' });
    assert.equal(header(replay, 'idempotent-replayed'), 'true');
    assert.ok(replay.body.equals(first.body));
  });

  test('mismatchStatus: 400 answers a reused key with 400', async () => {
    const key = uniqueKey('mm400');
    assert.equal((await send(`${proxy.url}/stripe/pay`, { headers: { 'idempotency-key': key }, body: 'a' })).status, 201);
    assertProblem(await send(`${proxy.url}/stripe/pay`, { headers: { 'idempotency-key': key }, body: 'b' }), 'key-mismatch', 400);
  });

  test('missing key on a required route → 400, upstream not called', async () => {
    const n = upstream.executions();
    const p = assertProblem(await send(`${proxy.url}/req/pay`, { body: 'x' }), 'key-missing', 400);
    assert.match(p.detail, /idempotency-key/i);
    assert.equal(upstream.executions(), n);
  });

  test('malformed keys → 400, nothing reaches the upstream or binds a key', async () => {
    const n = upstream.executions();
    const long = 'k'.repeat(256);
    const cases: Array<[string, Array<string | Buffer>]> = [
      ['empty', ['Idempotency-Key: ']],
      ['empty SF string', ['Idempotency-Key: ""']],
      ['256 chars', [`Idempotency-Key: ${long}`]],
      ['tab inside', ['Idempotency-Key: ab\tcd']],
      ['space inside', ['Idempotency-Key: ab cd']],
      ['é as raw UTF-8 bytes', [Buffer.concat([Buffer.from('Idempotency-Key: caf'), Buffer.from('é', 'utf8')])]],
      ['two header lines', ['Idempotency-Key: dup-a', 'Idempotency-Key: dup-b']],
      ['two equal header lines', ['Idempotency-Key: dup-a', 'Idempotency-Key: dup-a']],
      ['an empty line and a key', ['Idempotency-Key: ', 'Idempotency-Key: dup-c']],
      ['bad SF string (unterminated)', ['Idempotency-Key: "abc']],
      ['bad SF string (bad escape)', ['Idempotency-Key: "a\\bc"']],
    ];
    for (const [label, lines] of cases) {
      const r = await rawPost(proxy.url, '/pay', lines, 'body');
      assert.equal(r.status, 400, `${label}: ${r.body.toString()}`);
      assertProblem(r, 'key-malformed', 400);
    }
    // Control bytes never get past Node's HTTP parser: still a catalogue problem with a request id.
    for (const ctl of [0x7f, 0x01]) {
      const r = await rawPost(proxy.url, '/pay', [Buffer.concat([Buffer.from('Idempotency-Key: ab'), Buffer.from([ctl]), Buffer.from('cd')])], 'body');
      const p = assertProblem(r, 'bad-request', 400);
      assert.equal(r.header('x-request-id'), p.requestId);
    }
    assert.equal(upstream.executions(), n, 'no malformed key reached the upstream');
    const stored = await sql(db.url, 'SELECT idem_key FROM idempotency_keys');
    for (const r of stored) assert.ok(!['dup-a', 'dup-b', 'dup-c', 'abc', long].includes(r.idem_key as string), `nothing bound: ${r.idem_key}`);
    // The parts of the rejected requests are free keys.
    await executesAfterwards('/pay', 'dup-a');
    await executesAfterwards('/pay', 'dup-b');
    await executesAfterwards('/pay', 'dup-c');
    // 255 characters is the longest accepted key.
    await executesAfterwards('/pay', 'k'.repeat(255));
  });

  test('bare abc and SF "abc" are the same key: the second is a replay', async () => {
    const key = uniqueKey('sf');
    const first = await rawPost(proxy.url, '/pay', [`Idempotency-Key: ${key}`], 'same');
    assert.equal(first.status, 201);
    const second = await rawPost(proxy.url, '/pay', [`Idempotency-Key: "${key}"`], 'same');
    assert.equal(second.status, 201);
    assert.equal(second.header('idempotent-replayed'), 'true');
    assert.ok(second.body.equals(first.body));
    // And the other way round.
    const key2 = uniqueKey('sf2');
    assert.equal((await rawPost(proxy.url, '/pay', [`Idempotency-Key: "${key2}"`], 'x')).header('idempotent-replayed'), undefined);
    assert.equal((await rawPost(proxy.url, '/pay', [`Idempotency-Key: ${key2}`], 'x')).header('idempotent-replayed'), 'true');
  });

  test('oversized body with Content-Length → 413, key not bound', async () => {
    const key = uniqueKey('big-cl');
    const n = upstream.executions();
    const r = await send(`${proxy.url}/small/pay`, { headers: { 'idempotency-key': key }, body: Buffer.alloc(2048, 'a') });
    assertProblem(r, 'body-too-large', 413);
    assert.equal(upstream.executions(), n);
    assert.equal(await rows(key), 0);
    await executesAfterwards('/small/pay', key);
  });

  test('oversized chunked body → 413, key not bound', async () => {
    const key = uniqueKey('big-chunked');
    const n = upstream.executions();
    const chunk = Buffer.alloc(600, 'b');
    const hex = chunk.length.toString(16);
    const req = Buffer.concat([
      Buffer.from(`POST /small/pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ${key}\r\nTransfer-Encoding: chunked\r\n\r\n`),
      Buffer.from(`${hex}\r\n`), chunk, Buffer.from('\r\n'),
      Buffer.from(`${hex}\r\n`), chunk, Buffer.from('\r\n'),
      Buffer.from(`${hex}\r\n`), chunk, Buffer.from('\r\n'),
      Buffer.from('0\r\n\r\n'),
    ]);
    const r = await rawRequest(proxy.url, req);
    assertProblem(r, 'body-too-large', 413);
    assert.equal(r.header('connection'), 'close');
    assert.equal(upstream.executions(), n);
    assert.equal(await rows(key), 0);
    await executesAfterwards('/small/pay', key);
  });

  test('a chunked body within the limit executes', async () => {
    const key = uniqueKey('ok-chunked');
    const req = `POST /small/pay HTTP/1.1\r\nHost: x\r\nConnection: close\r\nIdempotency-Key: ${key}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n`;
    const r = await rawRequest(proxy.url, req);
    assert.equal(r.status, 201);
    assert.equal(r.json().body, 'abcde');
  });

  test('headers over the parser limit → 431 headers-too-large', async () => {
    const n = upstream.executions();
    const r = await rawPost(proxy.url, '/pay', [`X-Big: ${'a'.repeat(40 * 1024)}`, 'Idempotency-Key: big-headers'], 'x');
    assertProblem(r, 'headers-too-large', 431);
    assert.equal(upstream.executions(), n);
  });

  test('every rejection carries the request id it was given', async () => {
    const r = await send(`${proxy.url}/req/pay`, { headers: { 'x-request-id': 'client-req-42' }, body: 'x' });
    const p = assertProblem(r, 'key-missing', 400);
    assert.equal(p.requestId, 'client-req-42');
    assert.equal(header(r, 'x-request-id'), 'client-req-42');
  });
});
