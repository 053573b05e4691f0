import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { compileFingerprint, fingerprint } from '../../src/policy/fingerprint.js';
import { parseJsonBody } from '../../src/policy/json.js';

// Fingerprints are stored with every record: a proxy upgraded in place must
// compute the same bytes for the same request, or every retry across the
// upgrade would be refused as a mismatch. These pin the documented layout
// (SHA-256 over length-prefixed parts, src/policy/fingerprint.ts and
// docs/lifecycle.md) and two values
// computed by the first released implementation.

const lp = (s: string): string => `${Buffer.byteLength(s)}:${s}`;

test('raw body: sha256 of method, path, query, selected headers and the body, each length-prefixed', () => {
  const fp = compileFingerprint({ headers: ['x-tenant', 'x-multi'], query: true, json: 'raw', exclude: [] });
  const body = Buffer.from([0x7b, 0x00, 0xff, 0x7d]);
  const got = fingerprint(fp, 'POST', '/v1/pay/ü', 'a=1', { 'x-tenant': 'acme', 'x-multi': ['a', 'b'] }, body, undefined);
  const want = createHash('sha256')
    .update(lp('POST') + lp('/v1/pay/ü') + lp('a=1') + lp('x-tenant') + lp('acme') + lp('x-multi') + lp('a\nb') + `r${body.length}:`)
    .update(body)
    .digest();
  assert.equal(got.toString('hex'), want.toString('hex'));
});

test('fingerprints computed by the first release still come out the same', () => {
  const raw = compileFingerprint({ headers: ['x-tenant'], query: true, json: 'raw', exclude: [] });
  assert.equal(
    fingerprint(raw, 'POST', '/v1/payments', 'a=1', { 'x-tenant': 'acme' }, Buffer.from('{"amount":1250}'), undefined).toString('hex'),
    'b419e2271f8bd4dbb832df003fa3dc81f74b10e7cf9d6cf6109b785ba772fce6',
  );
  const canonical = compileFingerprint({ headers: [], query: false, json: 'canonical', exclude: ['/ts'] });
  const body = Buffer.from('{"b":2,"a":1,"ts":99}');
  assert.equal(
    fingerprint(canonical, 'POST', '/hooks', '', {}, body, parseJsonBody(body)).toString('hex'),
    '8ab94942f1a0e847e0e41233df141bb3030d5b1f4ff3d16b40974340bd8586e6',
  );
});
