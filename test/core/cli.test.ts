import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { runCli } from '../helpers/proxy.js';
import { tempDir } from '../helpers/tmp.js';

// docs/contract.md (Configuration, Command line): an invalid configuration fails at start, naming every bad field
// with its path; check-config prints the resolved policy; `serve --upstream
// URL` with no config file runs on the embedded store.

const BAD = `
lissten: 0.0.0.0:8080
upstream: { url: "http://127.0.0.1:1", timeout: 5 parsecs }
defaults:
  lease: 2h
  ttl: 1h
routes:
  - name: a
    match: { methods: [POST] }
    mode: sometimes
  - name: b
    match: { path: "/b" }
    mismatchStatus: 418
`;

const GOOD = `
upstream: { url: "http://127.0.0.1:3000" }
routes:
  - name: payments
    match: { methods: [POST], path: "/v1/payments/**" }
    required: true
    lease: 30s
  - name: everything-else
    match: { path: "/**" }
    mode: passthrough
`;

const BAD_FIELDS = ['lissten', 'upstream.timeout', 'defaults.lease', 'routes[0].match.path', 'routes[0].mode', 'routes[1].mismatchStatus'];

describe('command line', () => {
  let dir: ReturnType<typeof tempDir>;
  let bad: string;
  let good: string;
  before(() => {
    dir = tempDir();
    bad = dir.write('bad.yaml', BAD);
    good = dir.write('good.yaml', GOOD);
  });
  after(() => dir.remove());

  test('serve with an invalid file exits non-zero and names every bad field with its path', async () => {
    const r = await runCli(['serve', '--config', bad, '--listen', '127.0.0.1:0', '--admin', 'off']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /invalid configuration/);
    for (const f of BAD_FIELDS) assert.ok(r.stderr.includes(`${f}:`), `stderr names ${f}:\n${r.stderr}`);
    assert.doesNotMatch(r.stdout, /proxy listening/);
  });

  test('check-config prints the resolved policy of a good file and exits 0', async () => {
    const r = await runCli(['check-config', good]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /valid/);
    assert.match(r.stdout, /payments/);
    assert.match(r.stdout, /everything-else/);
    assert.match(r.stdout, /\/v1\/payments\/\*\*/);
    assert.match(r.stdout, /required/);
    assert.match(r.stdout, /30s/);
    assert.match(r.stdout, /passthrough/);
  });

  test('check-config on a bad file lists the errors and exits non-zero', async () => {
    const r = await runCli(['check-config', bad]);
    assert.notEqual(r.code, 0);
    for (const f of BAD_FIELDS) assert.ok(r.stderr.includes(`${f}:`), `stderr names ${f}`);
  });

  test('a missing file and a missing upstream are named', async () => {
    const missing = await runCli(['serve', '--config', path.join(dir.dir, 'nope.yaml')]);
    assert.notEqual(missing.code, 0);
    assert.match(missing.stderr, /nope\.yaml/);
    const noUpstream = await runCli(['serve', '--listen', '127.0.0.1:0']);
    assert.notEqual(noUpstream.code, 0);
    assert.match(noUpstream.stderr, /upstream/);
  });
});
