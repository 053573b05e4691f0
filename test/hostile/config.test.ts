import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { runCli } from '../../src/cli/index.js';
import { runCli as runCliProcess } from '../helpers/proxy.js';

// Invalid YAML and configurations of every wrong shape: `check-config`
// exits non-zero and names the field (its path in the file) for each.
// In-process for speed; one case through a real process for the exit code.

const U = 'upstream: { url: "http://127.0.0.1:3000" }\n';
const route = (extra: string): string => `${U}routes:\n  - name: r\n    match: { path: /x }\n${extra}`;
const billionLaughs = ['a: &a ["x","x","x","x","x","x","x","x","x"]', 'b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]', 'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]',
  'd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]', 'e: [*d,*d,*d,*d,*d,*d,*d,*d,*d]'].join('\n');

const CASES: Array<[string, string, RegExp[]]> = [
  ['tab indentation', `${U}routes:\n\t- name: a\n`, [/line 3/, /Tabs/]],
  ['unclosed flow mapping', `${U}routes: [ { name: a, match: { path: /x }\n`, [/YAML syntax error at line \d+/]],
  ['duplicate key', `${U}listen: 1\nlisten: 2\n`, [/line 3/, /unique/]],
  ['alias bomb (billion laughs)', `${U}${billionLaughs}\n`, [/invalid configuration in/, /alias/i]],
  ['a list, not a mapping', '- a\n- b\n', [/\(top level\): must be a mapping/]],
  ['binary garbage', '\x00\x01\x02garbage\xff', [/./]],
  ['unknown top-level field', `${U}lissten: 0.0.0.0:8080\n`, [/lissten: unknown field/, /line 2/]],
  ['__proto__ smuggled as a field', `${U}__proto__: { polluted: true }\n`, [/__proto__: unknown field/]],
  ['routes as a mapping', `${U}routes: { a: 1 }\n`, [/routes: must be a list/]],
  ['route without a name', `${U}routes:\n  - match: { path: /x }\n`, [/routes\[0\]\.name: is required/]],
  ['route without match', `${U}routes:\n  - name: r\n`, [/routes\[0\]\.match: is required/]],
  ['match.path a number', `${U}routes:\n  - name: r\n    match: { path: 5 }\n`, [/routes\[0\]\.match\.path/]],
  ['unknown route field', route('    lese: 1s\n'), [/routes\[0\]\.lese: unknown field/]],
  ['lease not a duration', route('    lease: soon\n'), [/routes\[0\]\.lease/]],
  ['lease longer than ttl', route('    lease: 2h\n    ttl: 1h\n'), [/routes\[0\]\.lease/, /ttl/]],
  ['maxBodyBytes not a size', route('    maxBodyBytes: 1 zillion\n'), [/routes\[0\]\.maxBodyBytes/]],
  ['mode misspelled', route('    mode: enforcing\n'), [/routes\[0\]\.mode/]],
  ['mismatchStatus 409', route('    mismatchStatus: 409\n'), [/routes\[0\]\.mismatchStatus/]],
  ['tenant with no source', route('    tenant: {}\n'), [/routes\[0\]\.tenant/]],
  ['tenant with two sources', route('    tenant: { constant: a, fromHeader: x-t }\n'), [/routes\[0\]\.tenant/]],
  ['key.fromBody not a JSON Pointer', route('    key: { fromBody: id }\n'), [/routes\[0\]\.key\.fromBody/]],
  ['methods empty', route('    methods: []\n'), [/routes\[0\]\.methods/]],
  ['releaseOn out of range', route('    releaseOn: [700]\n'), [/routes\[0\]\.releaseOn\[0\]/]],
  ['fingerprint.exclude without canonical', route('    fingerprint: { exclude: [/a] }\n'), [/routes\[0\]\.fingerprint\.exclude/]],
  ['storeHeaders with a framing header', route('    storeHeaders: [content-length]\n'), [/routes\[0\]\.storeHeaders/]],
  ['duplicate route names', `${U}routes:\n  - name: r\n    match: { path: /x }\n  - name: r\n    match: { path: /y }\n`, [/routes\[1\]\.name/]],
  ['upstream.url not http', 'upstream: { url: "ftp://x" }\n', [/upstream\.url: must use http/]],
  ['upstream.url missing', 'listen: 127.0.0.1:0\n', [/upstream\.url: is required/]],
  ['listen not an address', `${U}listen: nope\n`, [/listen/]],
  ['store.poolSize zero', `${U}store: { poolSize: 0 }\n`, [/store\.poolSize/]],
  ['defaults.lease not a duration', `${U}defaults: { lease: forever }\n`, [/defaults\.lease/]],
  ['several errors at once, each named', `${U}lissten: 1\nroutes:\n  - name: r\n    match: { path: 5 }\n    mode: x\n`, [/3 errors/, /lissten/, /routes\[0\]\.match\.path/, /routes\[0\]\.mode/]],
  ['nested 5000 deep', `${U}a: ${'['.repeat(5000)}${']'.repeat(5000)}\n`, [/invalid configuration/]],
];

function sink(): { stream: Writable; text: () => string } {
  let s = '';
  return { stream: new Writable({ write(c, _e, cb) { s += String(c); cb(); } }), text: () => s };
}

describe('hostile configuration files: check-config exits non-zero and names the field', () => {
  let dir: string;
  before(() => { dir = mkdtempSync(path.join(tmpdir(), 'idem-hostile-cfg-')); });
  after(() => rmSync(dir, { recursive: true, force: true }));

  CASES.forEach(([name, yaml, want], i) => {
    test(name, async () => {
      const file = path.join(dir, `c${i}.yaml`);
      writeFileSync(file, yaml, 'latin1');
      const out = sink();
      const err = sink();
      const code = await runCli(['check-config', file], { env: {}, stdout: out.stream, stderr: err.stream, onShutdownSignal: () => {} });
      assert.notEqual(code, 0, `exit code (stdout: ${out.text()})`);
      assert.equal(out.text(), '', 'nothing printed as valid');
      for (const re of want) assert.match(err.text(), re);
      assert.doesNotMatch(err.text(), /at .*\.js:\d+/, 'no stack trace');
    });
  });

  test('the real process exits 2 and names the field', async () => {
    const file = path.join(dir, 'process.yaml');
    writeFileSync(file, route('    mode: enforcing\n'));
    const r = await runCliProcess(['check-config', file]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /routes\[0\]\.mode/);
  });
});
