import { test } from 'node:test';
import assert from 'node:assert/strict';
import { classify, TimeoutSignal } from '../../src/proxy/upstream.js';
import { upstreamRequestHeaders } from '../../src/proxy/headers.js';

// The rules behind the key's fate (STYLE habit 6), as pure functions: when a
// failure happened decides release (not sent) or store (outcome unknown).

test('failures before a byte was sent classify as not_sent (the key is released)', () => {
  for (const code of ['ECONNREFUSED', 'UND_ERR_CONNECT_TIMEOUT', 'ENOTFOUND', 'UND_ERR_INVALID_ARG', 'UND_ERR_NOT_SUPPORTED']) {
    assert.equal(classify(Object.assign(new Error(code), { code })).kind, 'not_sent', code);
  }
});

test('failures after sending classify as timeout or reset (outcome unknown)', () => {
  assert.equal(classify(Object.assign(new Error('x'), { code: 'UND_ERR_HEADERS_TIMEOUT' })).kind, 'timeout');
  assert.equal(classify(Object.assign(new Error('x'), { code: 'UND_ERR_SOCKET' })).kind, 'reset');
  assert.equal(classify(Object.assign(new Error('x'), { code: 'ECONNRESET' })).kind, 'reset');
  // The body timer destroys the body stream with a TimeoutSignal.
  assert.equal(classify(new TimeoutSignal(500)).kind, 'timeout');
});

test('request headers: hop-by-hop, Connection-named and Expect dropped; the rest kept in order', () => {
  const raw = [
    'Host', 'a.example', 'Connection', 'keep-alive, X-Named', 'X-Named', '1', 'Keep-Alive', 'timeout=5', 'TE', 'trailers',
    'Upgrade', 'h2c', 'Proxy-Authorization', 'Basic x', 'Expect', '100-continue', 'Idempotency-Key', 'k1',
    'X-A', '1', 'X-A', '2', 'Content-Length', '3',
  ];
  const headers = { connection: 'keep-alive, X-Named', host: 'a.example' };
  const out = upstreamRequestHeaders(raw, headers, { clientIp: '10.0.0.1', proto: 'http', host: 'a.example' }, true);
  const pairs: string[][] = [];
  for (let i = 0; i < out.length; i += 2) pairs.push([out[i]!, out[i + 1]!]);
  assert.deepEqual(pairs, [
    ['Host', 'a.example'], ['Idempotency-Key', 'k1'], ['X-A', '1'], ['X-A', '2'],
    ['x-forwarded-for', '10.0.0.1'], ['x-forwarded-proto', 'http'], ['x-forwarded-host', 'a.example'],
  ]);
});

test('request headers: a client-sent Idempotency-Claim is removed, in any case and repeated', () => {
  const raw = ['Host', 'a', 'Idempotency-Claim', 'v1.x.y.z', 'idempotency-claim', 'v1.a.b.c', 'IDEMPOTENCY-CLAIM', 'q', 'Idempotency-Key', 'k1'];
  const out = upstreamRequestHeaders(raw, { host: 'a' }, { clientIp: '10.0.0.1', proto: 'http', host: 'a' }, false);
  assert.deepEqual(out.filter((_, i) => i % 2 === 0), ['Host', 'Idempotency-Key', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host']);
  // With a Connection header the slow path runs: the same rule.
  const out2 = upstreamRequestHeaders([...raw, 'Connection', 'x-other'], { host: 'a', connection: 'x-other' }, { clientIp: '10.0.0.1', proto: 'http', host: 'a' }, false);
  assert.ok(!out2.some((v, i) => i % 2 === 0 && v.toLowerCase() === 'idempotency-claim'));
});

test('request headers: the client\'s traceparent and tracestate are removed, in any case, only when the proxy sends its own', () => {
  const raw = ['Host', 'a', 'Traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'TRACESTATE', 'v=1', 'tracestate', 'w=2', 'X-A', '1'];
  const info = { clientIp: '10.0.0.1', proto: 'http', host: 'a' };
  const names = (out: string[]): string[] => out.filter((_, i) => i % 2 === 0);
  assert.deepEqual(names(upstreamRequestHeaders(raw, { host: 'a' }, info, false, true)), ['Host', 'X-A', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host']);
  assert.deepEqual(names(upstreamRequestHeaders(raw, { host: 'a' }, info, false)), ['Host', 'Traceparent', 'TRACESTATE', 'tracestate', 'X-A', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host']);
  // With a Connection header the slow path runs: the same rule.
  const slow = upstreamRequestHeaders([...raw, 'Connection', 'x-other'], { host: 'a', connection: 'x-other' }, info, false, true);
  assert.deepEqual(names(slow), ['Host', 'X-A', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host']);
});
