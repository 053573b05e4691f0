// Profiles in the configuration: a preset sits just below the block naming
// it, every field it sets can be overridden per route, check-config says
// which values a profile gave, and the config/ examples resolve as their
// comments say.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../../src/config/load.js';
import { describeConfig } from '../../src/config/describe.js';
import type { Config } from '../../src/config/types.js';

const load = (text: string): Config => loadConfig({ text, flags: { upstream: 'http://127.0.0.1:9', databaseUrl: null }, env: {} });

function example(name: string): Config {
  const dirs = [path.resolve(process.cwd(), 'config'), fileURLToPath(new URL('../../../config', import.meta.url))];
  const dir = dirs.find((d) => existsSync(path.join(d, name)));
  assert.ok(dir, `config/${name} not found`);
  return loadConfig({ file: path.join(dir, name), env: { DATABASE_URL: 'postgres://p@db/x' } });
}

test('no profile: ietf with every built-in value; stripe sets mismatchStatus 400 and the envelope', () => {
  const [plain] = load('routes:\n  - name: a\n    match: { path: /a }\n').routes;
  assert.equal(plain!.profile, 'ietf');
  assert.equal(plain!.errorFormat, 'problem');
  assert.deepEqual(plain!.fromProfile, []);
  const [s] = load('defaults:\n  profile: stripe\n').routes;
  assert.equal(s!.mismatchStatus, 400);
  assert.equal(s!.errorFormat, 'stripe');
  assert.deepEqual([...s!.fromProfile].sort(), ['errorFormat', 'mismatchStatus']);
});

test('acp: the whole preset, and every field of it overridable per route', () => {
  const c = load(`
defaults:
  profile: acp
routes:
  - name: preset
    match: { path: /a/** }
  - name: overridden
    match: { path: /b/** }
    required: false
    methods: [POST, PATCH]
    releaseOn: [429]
    fingerprint: { json: raw, headers: [content-type] }
    keyScope: tenant
    echoKey: false
    errorFormat: problem
    mismatchStatus: 400
`);
  const [a, b] = c.routes;
  assert.equal(a!.required, true);
  assert.deepEqual(a!.methods, ['POST']);
  assert.deepEqual(a!.releaseOn, [401, 403, 429, '5xx']);
  assert.deepEqual(a!.fingerprint, { headers: [], query: false, json: 'canonical', exclude: [] });
  assert.equal(a!.keyScope, 'tenantAndPath');
  assert.equal(a!.echoKey, true);
  assert.equal(a!.errorFormat, 'acp');
  assert.equal(b!.profile, 'acp');
  assert.equal(b!.required, false);
  assert.deepEqual(b!.methods, ['POST', 'PATCH']);
  assert.deepEqual(b!.releaseOn, [429]);
  assert.deepEqual(b!.fingerprint, { headers: ['content-type'], query: false, json: 'raw', exclude: [] });
  assert.equal(b!.keyScope, 'tenant');
  assert.equal(b!.echoKey, false);
  assert.equal(b!.errorFormat, 'problem');
  assert.equal(b!.mismatchStatus, 400);
  assert.deepEqual(b!.fromProfile, ['fingerprint.query']);
});

test('a route naming a profile overrides the defaults block; a defaults profile does not override defaults fields', () => {
  const c = load(`
defaults:
  mismatchStatus: 400
  profile: stripe
routes:
  - name: acp
    match: { path: /acp/** }
    profile: acp
  - name: inherits
    match: { path: /x/** }
`);
  assert.equal(c.routes[0]!.mismatchStatus, 422, "the route's acp preset sits over defaults");
  assert.equal(c.routes[1]!.mismatchStatus, 400);
  assert.equal(c.routes[1]!.errorFormat, 'stripe');
});

test('check-config prints the profile and marks the values it gave', () => {
  const text = describeConfig(load('defaults:\n  profile: acp\n  mismatchStatus: 400\n'));
  assert.match(text, /profile +acp/);
  assert.match(text, /release on +401, 403, 429, 5xx {2}\[profile acp\]/);
  assert.match(text, /key scope +tenant and request path {2}\[profile acp\]/);
  assert.match(text, /key reused +400 for a different payload\n/, 'overridden: not marked');
});

test('bad values name the field', () => {
  assert.throws(() => load('defaults:\n  profile: paypal\n'), /defaults\.profile: must be one of ietf, stripe, acp \(got "paypal"\)/);
  assert.throws(() => load('routes:\n  - name: a\n    match: { path: /a }\n    keyScope: path\n'), /routes\[0\]\.keyScope: must be one of tenant, tenantAndPath/);
  assert.throws(() => load('routes:\n  - name: a\n    match: { path: /a }\n    profile: acp\n    ttl: 12h\n'), /routes\[0\]\.ttl: ttl \(12h\) must be at least 24h under profile: acp/);
});

test('config/ examples: one per profile, resolving as their comments say', () => {
  const s = example('profile-stripe.yaml');
  assert.ok(s.routes.every((r) => r.profile === 'stripe' && r.errorFormat === 'stripe' && r.mismatchStatus === 400));
  assert.equal(s.routes.find((r) => r.name === 'charges')!.required, true);
  const a = example('profile-acp.yaml');
  for (const r of a.routes) {
    assert.equal(r.profile, 'acp');
    assert.equal(r.required, true);
    assert.equal(r.keyScope, 'tenantAndPath');
    assert.ok(r.ttlMs >= 86_400_000);
    assert.ok(r.releaseOn.includes('5xx'));
  }
  const i = example('profile-ietf.yaml');
  assert.equal(i.routes[0]!.profile, 'ietf');
  assert.equal(i.routes[0]!.errorFormat, 'problem');
  assert.equal(i.routes[0]!.mismatchStatus, 422);
});
