import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { cacheKey, decode, encodeComplete, encodeInFlight } from '../../src/store/cache-codec.js';
import { defaultCachePrefix } from '../../src/store/redis-cache.js';
import type { StoredResponse } from '../../src/store/records.js';

// The binary value format and the key names: pure functions, checked
// exhaustively with generated inputs.

const fp = createHash('sha256').update('x').digest();
const NOW = 1_700_000_000_000;

describe('cache value format', () => {
  test('a completed record round-trips: status, repeated headers in order, raw body', () => {
    const r: StoredResponse = {
      status: 201,
      headers: [['content-type', 'application/octet-stream'], ['set-cookie', 'a=1'], ['set-cookie', 'b=2'], ['x-u', 'caf\u00e9 \u2603']],
      body: Buffer.from([0x1f, 0x8b, 0, 255, 13, 10]),
      bodyRetained: true,
      bodySize: 6,
    };
    const hit = decode(encodeComplete(fp, r, NOW + 1000), NOW);
    assert.ok(hit !== null && hit.kind === 'complete');
    assert.ok(hit.fingerprint.equals(fp));
    assert.deepEqual(hit.response.headers, r.headers);
    assert.ok(hit.response.body.equals(r.body));
    assert.equal(hit.response.status, 201);
    assert.equal(hit.response.bodyRetained, true);
    assert.equal(hit.response.bodySize, 6);
  });

  test('a record without its body (over maxStoredResponseBytes) keeps bodyRetained false and the size', () => {
    const r: StoredResponse = { status: 200, headers: [], body: Buffer.alloc(0), bodyRetained: false, bodySize: 5_000_000_000 };
    const hit = decode(encodeComplete(fp, r, NOW + 1), NOW);
    assert.ok(hit?.kind === 'complete');
    assert.equal(hit.response.bodyRetained, false);
    assert.equal(hit.response.bodySize, 5_000_000_000);
  });

  test('generated records round-trip exactly', () => {
    const header = fc.tuple(fc.string({ minLength: 1, maxLength: 20 }), fc.string({ maxLength: 200 }));
    fc.assert(fc.property(
      fc.integer({ min: 100, max: 599 }), fc.array(header, { maxLength: 12 }), fc.uint8Array({ maxLength: 2000 }), fc.boolean(),
      (status, headers, body, retained) => {
        const r: StoredResponse = { status, headers, body: Buffer.from(body), bodyRetained: retained, bodySize: body.length };
        const hit = decode(encodeComplete(fp, r, NOW + 1), NOW);
        assert.ok(hit?.kind === 'complete');
        assert.deepEqual({ ...hit.response, body: Buffer.from(hit.response.body) }, { ...r, body: Buffer.from(body) });
      },
    ));
  });

  test('values past their validity stamp, truncated or of another version are misses', () => {
    const r: StoredResponse = { status: 200, headers: [['a', 'b']], body: randomBytes(10), bodyRetained: true, bodySize: 10 };
    const v = encodeComplete(fp, r, NOW + 1000);
    assert.equal(decode(v, NOW + 1000), null);
    for (let n = 0; n < 3 + fp.length + 8 + 13 + 6; n++) assert.equal(decode(v.subarray(0, n), NOW), null, `truncated to ${n}`);
    const other = Buffer.from(v);
    other[0] = 2;
    assert.equal(decode(other, NOW), null);
  });

  test('an in-flight marker carries the fingerprint and the lease for Retry-After', () => {
    const hit = decode(encodeInFlight(fp, NOW + 5000, NOW + 89_500), NOW);
    assert.ok(hit?.kind === 'in_flight');
    assert.ok(hit.fingerprint.equals(fp));
    assert.equal(hit.retryAfterS, 90);
    assert.equal((decode(encodeInFlight(fp, NOW + 5000, NOW + 10), NOW) as { retryAfterS: number }).retryAfterS, 1);
    assert.equal(decode(encodeInFlight(fp, NOW, NOW + 10), NOW), null);
  });
});

describe('cache key names', () => {
  const visible = fc.string({ unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 12 });

  test('distinct (tenant, key) pairs never share a name', () => {
    fc.assert(fc.property(visible, visible, visible, visible, (t1, k1, t2, k2) => {
      fc.pre(t1 !== t2 || k1 !== k2);
      assert.notEqual(cacheKey('p:', t1, k1), cacheKey('p:', t2, k2));
    }));
    assert.notEqual(cacheKey('p:', 'a}', 'k'), cacheKey('p:', 'a%7D', 'k'));
    assert.notEqual(cacheKey('p:', 'a', '}:k'), cacheKey('p:', 'a}:', 'k'));
  });

  test('the tenant is exactly the Redis Cluster hash tag', () => {
    fc.assert(fc.property(visible, visible, (tenant, key) => {
      const name = cacheKey('idem:', tenant, key);
      const open = name.indexOf('{');
      const close = name.indexOf('}', open + 1);
      const tag = name.slice(open + 1, close);
      assert.equal(tag.indexOf('}'), -1);
      assert.equal(tag.replace(/%(25|7B|7D)/g, (_, c: string) => (c === '25' ? '%' : c === '7B' ? '{' : '}')), tenant);
      assert.equal(name.slice(close + 2), key);
    }));
  });

  test('the default prefix names the database (never its credentials): deployments sharing a Redis stay apart', () => {
    const a = defaultCachePrefix({ postgres: 'postgres://app:secret@db.internal:5432/payments', dataDir: '.' });
    assert.equal(a, defaultCachePrefix({ postgres: 'postgres://app:rotated@db.internal/payments?sslmode=require', dataDir: '.' }));
    assert.notEqual(a, defaultCachePrefix({ postgres: 'postgres://app:secret@db.internal:5432/orders', dataDir: '.' }));
    assert.notEqual(a, defaultCachePrefix({ postgres: null, dataDir: './data' }));
    assert.match(a, /^idem:[0-9a-f]{8}:$/);
    assert.ok(!a.includes('secret'));
  });
});
