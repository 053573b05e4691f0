import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { expectRejected, startBench, type Bench } from './support.js';
import { rawCollect } from '../helpers/raw-http.js';

// Request framing attacks: conflicting Content-Length / Transfer-Encoding
// (request smuggling), malformed request lines and header lines, oversized
// header blocks. Each is tried on a deduplicated route (body buffered) and
// on a passthrough route (body streamed to the upstream): the smuggled
// request must never reach the upstream, and the connection must close
// after the single error response.

const SMUGGLED = 'GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n';
const head = (path: string, extra: string): string =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nIdempotency-Key: hostile-framing\r\nContent-Type: application/json\r\n${extra}\r\n`;

/** name → (path → bytes), expected status, problem slug, detail. */
const CORPUS: Array<{ name: string; bytes: (path: string) => string; status: number; type: string; detail?: RegExp }> = [
  { name: 'CL.TE: Content-Length and Transfer-Encoding', bytes: (p) => head(p, 'Content-Length: 6\r\nTransfer-Encoding: chunked\r\n') + `0\r\n\r\n${SMUGGLED}`, status: 400, type: 'bad-request', detail: /Transfer-Encoding|Content-Length/ },
  { name: 'TE.CL: Transfer-Encoding then Content-Length', bytes: (p) => head(p, 'Transfer-Encoding: chunked\r\nContent-Length: 4\r\n') + `5c\r\n${SMUGGLED}\r\n0\r\n\r\n`, status: 400, type: 'bad-request', detail: /Content-Length|Transfer-Encoding/ },
  { name: 'duplicate Content-Length, different values', bytes: (p) => head(p, 'Content-Length: 2\r\nContent-Length: 40\r\n') + `{}${SMUGGLED}`, status: 400, type: 'bad-request', detail: /Content-Length/ },
  { name: 'duplicate Content-Length, same value', bytes: (p) => head(p, 'Content-Length: 2\r\nContent-Length: 2\r\n') + '{}', status: 400, type: 'bad-request', detail: /Content-Length/ },
  { name: 'Content-Length as a list', bytes: (p) => head(p, 'Content-Length: 2, 2\r\n') + '{}', status: 400, type: 'bad-request', detail: /Content-Length/ },
  { name: 'negative Content-Length', bytes: (p) => head(p, 'Content-Length: -1\r\n'), status: 400, type: 'bad-request', detail: /Content-Length/ },
  { name: 'Content-Length with a sign', bytes: (p) => head(p, 'Content-Length: +2\r\n') + '{}', status: 400, type: 'bad-request', detail: /Content-Length/ },
  { name: 'hexadecimal Content-Length', bytes: (p) => head(p, 'Content-Length: 0x2\r\n') + '{}', status: 400, type: 'bad-request', detail: /Content-Length/ },
  { name: 'Content-Length overflow', bytes: (p) => head(p, 'Content-Length: 184467440737095516160\r\n') + '{}', status: 400, type: 'bad-request', detail: /Content-Length/ },
  { name: 'Transfer-Encoding twice', bytes: (p) => head(p, 'Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n') + '2\r\n{}\r\n0\r\n\r\n', status: 400, type: 'bad-request', detail: /Transfer-Encoding/ },
  { name: 'Transfer-Encoding: xchunked', bytes: (p) => head(p, 'Transfer-Encoding: xchunked\r\n') + '2\r\n{}\r\n0\r\n\r\n', status: 501, type: 'transfer-coding-unsupported', detail: /xchunked/ },
  { name: 'Transfer-Encoding: chunked, identity', bytes: (p) => head(p, 'Transfer-Encoding: chunked, identity\r\n') + '2\r\n{}\r\n0\r\n\r\n', status: 400, type: 'bad-request', detail: /Transfer-Encoding/ },
  { name: 'space before the colon of Transfer-Encoding', bytes: (p) => head(p, 'Transfer-Encoding : chunked\r\n') + '2\r\n{}\r\n0\r\n\r\n', status: 400, type: 'bad-request', detail: /header/i },
  { name: 'obs-fold Transfer-Encoding', bytes: (p) => head(p, 'Transfer-Encoding:\r\n chunked\r\n') + '2\r\n{}\r\n0\r\n\r\n', status: 400, type: 'bad-request', detail: /header/i },
  { name: 'a transfer coding the proxy does not implement (gzip, chunked)', bytes: (p) => head(p, 'Transfer-Encoding: gzip, chunked\r\n') + '2\r\n{}\r\n0\r\n\r\n', status: 501, type: 'transfer-coding-unsupported', detail: /gzip/ },
  { name: 'HTTP/1.0 with Transfer-Encoding', bytes: (p) => head(p, 'Transfer-Encoding: chunked\r\n').replace('HTTP/1.1', 'HTTP/1.0') + '2\r\n{}\r\n0\r\n\r\n', status: 400, type: 'bad-request', detail: /HTTP\/1\.0/ },
  { name: 'chunk size overflow', bytes: (p) => head(p, 'Transfer-Encoding: chunked\r\n') + 'FFFFFFFFFFFFFFFFFF\r\n{}\r\n0\r\n\r\n', status: 400, type: 'bad-request', detail: /chunk/i },
  { name: 'control character in a chunk extension', bytes: (p) => head(p, 'Transfer-Encoding: chunked\r\n') + '2;\x01\r\n{}\r\n0\r\n\r\n', status: 400, type: 'bad-request', detail: /chunk/i },
  { name: 'chunks delimited by bare LF', bytes: (p) => head(p, 'Transfer-Encoding: chunked\r\n') + '2\n{}\n0\n\n', status: 400, type: 'bad-request' },
  { name: 'request line ended by bare LF', bytes: (p) => `POST ${p} HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}`, status: 400, type: 'bad-request' },
  { name: 'header line without a colon', bytes: (p) => head(p, 'NoColonHere\r\nContent-Length: 2\r\n') + '{}', status: 400, type: 'bad-request', detail: /header/i },
  { name: 'space inside a header name', bytes: (p) => head(p, 'Bad Name: 1\r\nContent-Length: 2\r\n') + '{}', status: 400, type: 'bad-request', detail: /header/i },
  { name: 'invalid method token', bytes: (p) => `P@ST ${p} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n`, status: 400, type: 'bad-request', detail: /method/i },
  { name: 'unknown HTTP version', bytes: (p) => `POST ${p} HTTP/9.9\r\nHost: x\r\nContent-Length: 0\r\n\r\n`, status: 400, type: 'bad-request', detail: /version/i },
  { name: 'space inside the request target', bytes: (p) => `POST ${p} x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n`, status: 400, type: 'bad-request' },
  { name: 'two Host header lines', bytes: (p) => head(p, 'Host: evil.example\r\nContent-Length: 2\r\n') + '{}', status: 400, type: 'bad-request', detail: /Host/ },
  { name: 'no Host header on HTTP/1.1', bytes: (p) => head(p, 'Content-Length: 2\r\n').replace('Host: x\r\n', '') + '{}', status: 400, type: 'bad-request', detail: /Host/ },
  { name: 'absolute-form target (would skip the /pay route)', bytes: (p) => head(p, 'Content-Length: 2\r\n').replace(`POST ${p} `, `POST http://evil.example${p} `) + '{}', status: 400, type: 'bad-request', detail: /origin-form/ },
  { name: 'dot segments in the path', bytes: (p) => head(p, 'Content-Length: 2\r\n').replace(`POST ${p} `, `POST /x/..${p} `) + '{}', status: 400, type: 'bad-request', detail: /segments/ },
  { name: 'OPTIONS * (undici sends no such target: not a 502 "upstream unreachable")', bytes: () => 'OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n', status: 400, type: 'bad-request', detail: /OPTIONS \*/ },
  { name: 'asterisk target with POST', bytes: (p) => head(p, 'Content-Length: 2\r\n').replace(`POST ${p} `, 'POST * ') + '{}', status: 400, type: 'bad-request', detail: /asterisk/ },
  { name: 'CONNECT (no tunnels)', bytes: () => 'CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n', status: 405, type: 'method-not-allowed' },
  { name: 'one header of 40 KiB', bytes: (p) => head(p, `X-Big: ${'a'.repeat(40 * 1024)}\r\nContent-Length: 2\r\n`) + '{}', status: 431, type: 'headers-too-large' },
  { name: 'header block of 40 KiB in small lines', bytes: (p) => head(p, `${Array.from({ length: 1300 }, (_, i) => `X-H${i}: ${'v'.repeat(24)}`).join('\r\n')}\r\nContent-Length: 2\r\n`) + '{}', status: 431, type: 'headers-too-large' },
];

describe('hostile framing and smuggling attempts', () => {
  let b: Bench;
  before(async () => { b = await startBench(); });
  after(async () => { await b?.close(); });

  for (const c of CORPUS) {
    test(c.name, async () => {
      for (const path of ['/pay/1', '/open/1']) {
        await expectRejected(b, c.bytes(path), { status: c.status, type: c.type, ...(c.detail ? { detail: c.detail } : {}) }, `${c.name} on ${path}`);
      }
      assert.equal(b.up.exchanges.filter((e) => e.url === '/smuggled').length, 0, 'the smuggled request never reached the upstream');
    });
  }

  test('control: the same bench forwards a well-formed request', async () => {
    const ok = await rawCollect(b.proxy.url, head('/open/1', 'Content-Length: 2\r\nConnection: close\r\n') + '{}');
    assert.equal(ok.status, 201);
    assert.equal(b.up.exchanges.length, 1);
  });
});
