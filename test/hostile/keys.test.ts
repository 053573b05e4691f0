import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { expectRejected, startBench, type Bench } from './support.js';
import { rawCollect } from '../helpers/raw-http.js';
import { rowCount } from '../helpers/db.js';

// Hostile idempotency keys, sent as raw bytes (no HTTP client would send
// most of them): control characters are refused by the HTTP parser,
// everything else outside visible ASCII, over 255 characters, empty, badly
// quoted or on two lines is refused by the key rules (docs/contract.md, step 2) — 400 each,
// nothing claimed, nothing forwarded.

const req = (keyLines: Buffer | string): Buffer => Buffer.concat([
  Buffer.from('POST /pay/1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n'),
  Buffer.isBuffer(keyLines) ? keyLines : Buffer.from(keyLines, 'latin1'),
  Buffer.from('\r\n{}'),
]);
const keyHeader = (...bytes: Array<string | number[]>): Buffer =>
  Buffer.concat([Buffer.from('Idempotency-Key: '), ...bytes.map((b) => (typeof b === 'string' ? Buffer.from(b, 'latin1') : Buffer.from(b))), Buffer.from('\r\n')]);

const PARSER: Array<[string, Buffer]> = [
  ['NUL byte', keyHeader('ab', [0x00], 'c')],
  ['SOH control character', keyHeader('ab', [0x01], 'c')],
  ['ESC (terminal escape)', keyHeader('ab', [0x1b], '[31mc')],
  ['DEL', keyHeader('ab', [0x7f], 'c')],
  ['bare CR inside the value', keyHeader('ab', [0x0d], 'c')],
  ['bare LF inside the value (header injection)', keyHeader('ab', [0x0a], 'X-Injected: 1')],
];

const KEY_RULES: Array<[string, Buffer, RegExp]> = [
  ['UTF-8 é', keyHeader('caf', [0xc3, 0xa9]), /visible ASCII/],
  ['lone 0xFF byte', keyHeader('ab', [0xff]), /visible ASCII/],
  ['UTF-8 right-to-left override', keyHeader('ab', [0xe2, 0x80, 0xae], 'cd'), /visible ASCII/],
  ['inner space', keyHeader('ab cd'), /visible ASCII/],
  ['inner tab', keyHeader('ab\tcd'), /visible ASCII/],
  ['256 characters', keyHeader('k'.repeat(256)), /256 characters/],
  ['empty', keyHeader(''), /empty/],
  ['only spaces', keyHeader('   '), /empty/],
  ['unterminated quoted string', keyHeader('"abc'), /quoted/],
  ['quote inside a quoted string', keyHeader('"a"b"'), /quote/],
  ['bad escape in a quoted string', keyHeader('"a\\nb"'), /escape/],
  ['empty quoted string', keyHeader('""'), /empty/],
  ['two header lines', Buffer.concat([keyHeader('a'), keyHeader('b')]), /more than one/],
  ['two header lines, same value', Buffer.concat([keyHeader('same'), keyHeader('same')]), /more than one/],
];

describe('hostile idempotency keys', () => {
  let b: Bench;
  before(async () => { b = await startBench(); });
  after(async () => { await b?.close(); });

  for (const [name, bytes] of PARSER) {
    test(`refused by the HTTP parser: ${name}`, async () => {
      await expectRejected(b, req(bytes), { status: 400, type: 'bad-request', detail: /header/i }, name);
    });
  }

  for (const [name, bytes, detail] of KEY_RULES) {
    test(`refused by the key rules: ${name}`, async () => {
      await expectRejected(b, req(bytes), { status: 400, type: 'key-malformed', detail }, name);
    });
  }

  test('missing key on a required route: 400 key-missing', async () => {
    await expectRejected(b, req(''), { status: 400, type: 'key-missing', detail: /idempotency-key/i }, 'missing');
  });

  test('controls: 255 characters and the quoted form are accepted, and mean the same key as the bare form', async () => {
    const rows = await rowCount(b.db.url);
    const long = await rawCollect(b.proxy.url, req(keyHeader('k'.repeat(255))));
    assert.equal(long.status, 201);
    const bare = await rawCollect(b.proxy.url, req(keyHeader('same-key-1')));
    assert.equal(bare.status, 201);
    const quoted = await rawCollect(b.proxy.url, req(keyHeader('"same-key-1"')));
    assert.equal(quoted.status, 201);
    assert.equal(quoted.header('idempotent-replayed'), 'true');
    assert.equal(await rowCount(b.db.url), rows + 2);
  });
});
