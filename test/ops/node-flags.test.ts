// node's own options (src/node-flags.ts): V8 sizes its heap before any of our
// code runs, so they go on node's command line. The Docker image and the
// benchmark pass them (test/ops/packaging.test.ts checks the image); `serve`
// started without them says so once, and stays quiet when the command line or
// NODE_OPTIONS gives them, with any value.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { missingNodeFlags, NODE_FLAGS } from '../../src/node-flags.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { spawnProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { admin, repoRoot } from './support.js';

/** Prints, in MiB, the largest young generation (new space) V8 grew to while churning objects. */
const CHURN = `const v8 = require('node:v8'); let peak = 0; const keep = [];
for (let i = 0; i < 300; i++) {
  const a = []; for (let j = 0; j < 20000; j++) a.push({ j, s: 'x' + j });
  keep.push(a); if (keep.length > 20) keep.shift();
  const ns = v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
  peak = Math.max(peak, ns.space_size);
}
console.log(peak / 1048576);`;

const HINT = 'node started without the recommended heap options';

describe('missingNodeFlags', () => {
  test('the options take effect: a node started with them keeps its young generation within the cap', () => {
    // Churn short-lived objects and report the largest young generation V8
    // grew to. Without the cap it grows past it, so this shows the options are
    // what bounds it (and that V8 still accepts them under this spelling).
    const cap = NODE_FLAGS.map((f) => /^--max-semi-space-size=(\d+)$/.exec(f)).find((m) => m !== null);
    assert.ok(cap, `NODE_FLAGS names the young-generation cap: ${NODE_FLAGS.join(' ')}`);
    const boundMiB = 2 * Number(cap[1]); // V8's new space is two semi-spaces
    const peak = (args: readonly string[]): number => {
      const out = execFileSync(process.execPath, [...args, '-e', CHURN], { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } });
      return Number(out.trim());
    };
    const capped = peak(NODE_FLAGS);
    const uncapped = peak([]);
    assert.ok(capped <= boundMiB, `young generation ${capped} MiB with ${NODE_FLAGS.join(' ')}, at most ${boundMiB}`);
    assert.ok(uncapped > boundMiB, `without the options it grows past the cap (${uncapped} MiB): the options are what bounds it`);
  });

  test('README and docs/operations.md give operators the same options', () => {
    for (const file of ['README.md', 'docs/operations.md']) {
      const text = readFileSync(path.join(repoRoot(), file), 'utf8');
      assert.ok(text.includes(`NODE_OPTIONS=${NODE_FLAGS.join(' ')}`), `${file} names NODE_OPTIONS=${NODE_FLAGS.join(' ')}`);
    }
  });

  test('missing when neither the command line nor NODE_OPTIONS sets it', () => {
    assert.deepEqual(missingNodeFlags([], undefined), ['--max-semi-space-size=4']);
    assert.deepEqual(missingNodeFlags(['--enable-source-maps'], '--max-old-space-size=200'), ['--max-semi-space-size=4']);
    // a longer option that merely starts with the same text is another option
    assert.deepEqual(missingNodeFlags(['--max-semi-space-size-x=8'], ''), ['--max-semi-space-size=4']);
  });

  test('present on the command line, in NODE_OPTIONS, with another value or V8\'s underscore spelling', () => {
    assert.deepEqual(missingNodeFlags(['--max-semi-space-size=16'], undefined), []);
    assert.deepEqual(missingNodeFlags([], '--enable-source-maps  --max-semi-space-size=4'), []);
    assert.deepEqual(missingNodeFlags(['--max-semi-space-size=8'], undefined), []);
    assert.deepEqual(missingNodeFlags(['--max_semi_space_size=2'], undefined), []);
  });

  test('npm start passes the same options as the image', () => {
    const pkg = JSON.parse(readFileSync(path.join(repoRoot(), 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    assert.match(pkg.scripts['start']!, new RegExp(`node ${NODE_FLAGS.join(' ')} dist/src/main\\.js demo`));
  });
});

describe('serve: the start-up hint, from a real process', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(async (_req, _n, res) => { res.writeHead(200); res.end('ok'); });
  });
  after(async () => {
    await upstream?.close();
    await db?.drop();
  });

  /** Every log line of one proxy run, from start to a clean SIGTERM exit. */
  async function runOnce(nodeArgs: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<Array<{ msg?: string; missing?: string[] }>> {
    const p = await spawnProxy(['serve', '--upstream', upstream.url, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', '--database-url', db.url], env, { nodeArgs });
    // One answered request: by then start-up, signal handlers included, is over.
    assert.equal((await admin(`${p.adminUrl}/healthz`)).status, 200);
    const code = await p.stop();
    assert.equal(code, 0, `exit ${code} (${p.proc.signalCode}):\n${p.lines.join('\n')}`);
    return p.lines.flatMap((l) => { try { return [JSON.parse(l) as { msg?: string; missing?: string[] }]; } catch { return []; } });
  }

  test('without the options: one line naming them', async () => {
    const hints = (await runOnce([])).filter((l) => l.msg?.startsWith(HINT));
    assert.equal(hints.length, 1, 'exactly one hint line');
    assert.deepEqual(hints[0]!.missing, [...NODE_FLAGS]);
  });

  test('with the options on the command line, or in NODE_OPTIONS: no hint', async () => {
    for (const [args, env] of [[NODE_FLAGS, {}], [[], { NODE_OPTIONS: NODE_FLAGS.join(' ') }]] as const) {
      const lines = await runOnce(args, env);
      assert.ok(lines.some((l) => l.msg === 'proxy listening'), 'the proxy started');
      assert.ok(lines.some((l) => l.msg === 'shutdown complete'), 'every line up to the exit was read');
      assert.equal(lines.filter((l) => l.msg?.startsWith(HINT)).length, 0, `no hint with ${JSON.stringify({ args, env })}`);
    }
  });
});
