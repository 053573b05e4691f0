import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { expectRejected, startBench, type Bench } from './support.js';
import { openSocket, rawCollect } from '../helpers/raw-http.js';
import { rowCount } from '../helpers/db.js';

// Hostile bodies: not JSON where the key comes from the body, a JSON Pointer
// that finds nothing or something that is no key, bodies over the route's
// limit (declared or streamed), and JSON built to exhaust the parser's or
// the canonicalizer's stack. Each gets a precise error; nothing is claimed.

const post = (path: string, body: string | Buffer, extra = ''): Buffer => {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body);
  return Buffer.concat([Buffer.from(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${b.length}\r\n${extra}\r\n`), b]);
};

const BODY_KEY: Array<[string, string, number, string, RegExp]> = [
  ['not JSON', 'id=evt_1', 400, 'key-body-not-json', /not valid JSON/],
  ['truncated JSON', '{"event":{"id":"evt_1"', 400, 'key-body-not-json', /not valid JSON/],
  ['empty body', '', 400, 'key-body-not-json', /not valid JSON/],
  ['JSON with a BOM', '\ufeff{"event":{"id":"evt_1"}}', 400, 'key-body-not-json', /not valid JSON/],
  ['pointer target missing', '{"event":{"type":"x"}}', 400, 'key-pointer-missing', /\/event\/id/],
  ['pointer through an array', '{"event":[{"id":"evt_1"}]}', 400, 'key-pointer-missing', /\/event\/id/],
  ['pointer target null', '{"event":{"id":null}}', 400, 'key-pointer-missing', /\/event\/id/],
  ['pointer target an object', '{"event":{"id":{"nested":"x"}}}', 400, 'key-malformed', /string or an integer/],
  ['pointer target a float', '{"event":{"id":1.5}}', 400, 'key-malformed', /string or an integer/],
  ['pointer target beyond 2^53', '{"event":{"id":123456789012345678901}}', 400, 'key-malformed', /string or an integer/],
  ['pointer target a boolean', '{"event":{"id":true}}', 400, 'key-malformed', /string or an integer/],
  ['pointer target with a control character', '{"event":{"id":"a\\u0001b"}}', 400, 'key-malformed', /visible ASCII/],
  ['pointer target with a newline', '{"event":{"id":"a\\nX-Injected: 1"}}', 400, 'key-malformed', /visible ASCII/],
  ['pointer target non-ASCII', '{"event":{"id":"évt"}}', 400, 'key-malformed', /visible ASCII/],
  ['pointer target empty', '{"event":{"id":""}}', 400, 'key-malformed', /empty/],
  ['pointer target too long', `{"event":{"id":"${'e'.repeat(256)}"}}`, 400, 'key-malformed', /256 characters/],
];

describe('hostile bodies', () => {
  let b: Bench;
  before(async () => { b = await startBench(); });
  after(async () => { await b?.close(); });

  for (const [name, body, status, type, detail] of BODY_KEY) {
    test(`key from the body: ${name}`, async () => {
      await expectRejected(b, post('/hooks/psp', body), { status, type, detail }, name);
    });
  }

  test('body over maxBodyBytes, declared: 413 at once, without reading it, and the connection closes', async () => {
    const rows = await rowCount(b.db.url);
    const s = await openSocket(b.proxy.url);
    await s.write('POST /pay/1 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: big-declared\r\nContent-Length: 10737418240\r\n\r\n');
    await s.write('x'.repeat(100)); // never the 10 GiB
    const reply = await s.done;
    assert.equal(reply.status, 413);
    assert.equal(reply.json().type, 'urn:idempotency-proxy:problem:body-too-large');
    assert.equal(reply.header('connection'), 'close');
    assert.equal(await rowCount(b.db.url), rows);
    assert.equal(b.up.exchanges.length, 0);
  });

  test('body over maxBodyBytes, chunked: 413 once the limit is passed', async () => {
    const chunk = 'y'.repeat(700);
    const bytes = `POST /pay/1 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: big-chunked\r\nTransfer-Encoding: chunked\r\n\r\n` +
      `${chunk.length.toString(16)}\r\n${chunk}\r\n`.repeat(3) + '0\r\n\r\n';
    await expectRejected(b, bytes, { status: 413, type: 'body-too-large', detail: /1024 bytes/ }, 'chunked 2100 bytes');
  });

  test('JSON nested 200 000 deep on a canonical-fingerprint route: an answer, never a crash or a 500', async () => {
    const depth = 200_000;
    const deep = '['.repeat(depth) + ']'.repeat(depth);
    const rows = await rowCount(b.db.url);
    const r1 = await rawCollect(b.proxy.url, post('/canonical/1', deep, 'Idempotency-Key: deep-1\r\n'), 5000);
    assert.equal(r1.status, 201, `got ${r1.raw.toString().slice(0, 300)}`);
    const r2 = await rawCollect(b.proxy.url, post('/canonical/1', deep, 'Idempotency-Key: deep-1\r\n'), 5000);
    assert.equal(r2.status, 201);
    assert.equal(r2.header('idempotent-replayed'), 'true');
    assert.equal(await rowCount(b.db.url), rows + 1);
  });

  test('JSON nested 200 000 deep where the key comes from the body: 400, never a crash', async () => {
    const depth = 200_000;
    const deep = `{"event":${'['.repeat(depth)}${']'.repeat(depth)}}`;
    const rows = await rowCount(b.db.url);
    const r = await rawCollect(b.proxy.url, post('/bighooks/psp', deep), 5000);
    assert.equal(r.status, 400, `got ${r.raw.toString().slice(0, 300)}`);
    assert.equal(r.json().type, 'urn:idempotency-proxy:problem:key-pointer-missing');
    assert.equal(await rowCount(b.db.url), rows);
  });
});
