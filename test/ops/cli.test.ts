// Every command's --help lists its options; every CLI error names what was
// wrong (the flag, the file, the URL) and exits non-zero.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { runCli } from '../helpers/proxy.js';
import { closedPort } from '../helpers/upstream.js';
import { cliInProcess, helpInProcess } from './support.js';
import { tempDir, type TempDir } from '../helpers/tmp.js';

describe('--help', () => {
  const HELP: Record<string, readonly string[]> = {
    '': ['serve', 'migrate', 'check-config', 'keys', 'verify', 'demo', '--config', '--database-url'],
    serve: ['--upstream', '--listen', '--admin', '--redis-url', '--log-level', '--config', '--database-url', 'SIGHUP'],
    migrate: ['--config', '--database-url'],
    'check-config': ['[file]', '--config'],
    keys: ['show', 'purge', 'list', 'resolve', '--key', '--tenant', '--tenant-id', '--route', '--body', '--yes', '--as', '--state', '--older-than', '--limit', '--cursor', '--all', '--json'],
    verify: ['--url', '--concurrency', '--method', '--header', '--data', '--key-header', '--timeout', '--retries', '--max-retry-wait', '--json', 'Exit codes', '{{key}}'],
    demo: ['--listen'],
  };
  let outputs: Record<string, { code: number | null; stdout: string; stderr: string }>;
  before(async () => {
    // The top level through the real binary; the commands in this process
    // (each start of the binary costs a second or two).
    outputs = { '': await runCli(['--help']) };
    for (const c of Object.keys(HELP).filter((c) => c !== '')) outputs[c] = await helpInProcess([c, '--help']);
  });
  for (const [command, options] of Object.entries(HELP)) {
    test(`${command || 'idempotency-proxy'} --help lists ${options.join(' ')}`, () => {
      const r = outputs[command]!;
      assert.equal(r.code, 0, r.stderr);
      for (const o of options) assert.ok(r.stdout.includes(o), `${command} --help lacks ${o}:\n${r.stdout}`);
    });
  }
});

describe('errors name what was wrong', () => {
  let dir: TempDir;
  let refused: number;
  before(async () => {
    dir = tempDir();
    refused = await closedPort();
  });
  after(() => dir?.remove());

  const fails = async (args: string[], pattern: RegExp, code = 2): Promise<void> => {
    const r = await cliInProcess(args);
    assert.equal(r.code, code, `${args.join(' ')}: exit ${r.code}\n${r.stdout}${r.stderr}`);
    assert.match(r.stderr, pattern, `${args.join(' ')}:\n${r.stderr}`);
  };

  test('unknown command, unknown flag, no command', async () => {
    await fails(['servee'], /Unknown argument: servee/);
    await fails(['serve', '--frobnicate'], /Unknown argument: frobnicate/);
    await fails([], /name a command: serve, migrate, check-config, keys, verify or demo/);
  });

  test('missing or invalid configuration file', async () => {
    const missing = `${dir.dir}/nope.yaml`;
    await fails(['serve', '--config', missing], new RegExp(`cannot read config file ${missing}: ENOENT`));
    await fails(['check-config', missing], /ENOENT/);
    const bad = dir.write('bad.yaml', 'upstream: { url: http://127.0.0.1:1 }\nlissten: 1\nshutdownTimeout: soon\n');
    await fails(['check-config', bad], /invalid configuration in .*bad\.yaml \(2 errors\):\n {2}- lissten: unknown field[\s\S]*shutdownTimeout: invalid duration "soon"/);
  });

  test('bad URLs and addresses', async () => {
    await fails(['serve', '--upstream', 'not a url'], /--upstream/);
    await fails(['serve'], /upstream\.url: is required/);
    await fails(['migrate', '--database-url', 'mysql://db/x'], /--database-url/);
  });

  test('keys', async () => {
    await fails(['keys', 'show'], /Missing required argument: key/);
    await fails(['keys', 'purge', '--key', 'k', '--tenant-id', 't'], /Add --yes to confirm/);
    await fails(['keys', 'drop', '--key', 'k'], /Invalid values:[\s\S]*action/);
    await fails(['keys', 'resolve', '--tenant-id', 't'], /Missing required argument: key/);
    await fails(['keys', 'resolve', '--tenant-id', 't', '--key', 'k'], /Missing required argument: as/);
    await fails(['keys', 'resolve', '--tenant-id', 't', '--key', 'k', '--as', 'maybe'], /Invalid values:[\s\S]*as/);
    await fails(['keys', 'list', '--state', 'stuck'], /--state: unknown state "stuck": one of in_flight, complete, outcome_unknown/);
    await fails(['keys', 'list', '--older-than', 'soon'], /--older-than: invalid duration "soon"/);
    await fails(['keys', 'list', '--older-than', '100000000d'], /--older-than: must be at most 36500d \(100 years\); got 100000000d/);
    await fails(['keys', 'list', '--limit', '0'], /--limit: must be a whole number from 1 to 1000/);
    await fails(['keys', 'list', '--cursor', '!!'], /--cursor: malformed/);
  });

  test('verify', async () => {
    await fails(['verify'], /verify needs --url/);
    await fails(['verify', '--url', 'localhost:8080/x'], /--url "localhost:8080\/x"/);
    await fails(['verify', '--url', 'ftp://127.0.0.1/x'], /--url "ftp:\/\/127\.0\.0\.1\/x": only http:\/\/ and https:\/\//);
    await fails(['verify', '--url', 'http://127.0.0.1:1/x', '-n', '0'], /--concurrency must be a whole number from 1 to 1000 \(got "0"\)/);
    await fails(['verify', '--url', 'http://127.0.0.1:1/x', '-n', 'many'], /--concurrency/);
    await fails(['verify', '--url', 'http://127.0.0.1:1/x', '-H', 'no colon'], /--header "no colon": expected "Name: value"/);
    await fails(['verify', '--url', 'http://127.0.0.1:1/x', '--timeout', 'soon'], /--timeout "soon"/);
    await fails(['verify', '--url', 'http://127.0.0.1:1/x', '--key-header', 'bad header'], /--key-header "bad header"/);
    await fails(['verify', '--url', 'http://127.0.0.1:1/x', '-d', `@${dir.dir}/missing.json`], /--data @.*missing\.json: cannot read .*missing\.json \(ENOENT\)/);
    await fails(['verify', '--url', `http://127.0.0.1:${refused}/x`, '-n', '2'], new RegExp(`cannot reach --url http://127\\.0\\.0\\.1:${refused}/x: .*ECONNREFUSED`));
  });
});
