// The compose stack without Docker: the demo upstream from docker/upstream,
// the proxy started with the compose service's own command line and config
// file (addresses swapped for local ones), `verify` through it and around it,
// and the image's HEALTHCHECK command (as the compose service runs it)
// against its admin listener.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { MAIN, spawnProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { closedPort } from '../helpers/upstream.js';
import { cliInProcess, repoRoot } from './support.js';

const root = repoRoot();
let db: TestDatabase;
let upstream: ChildProcess;
let upstreamUrl: string;
let proxy: SpawnedProxy;

/** The compose proxy command, with the file path and addresses made local. */
function composeCommand(upstream: string): string[] {
  const compose = parse(readFileSync(path.join(root, 'docker-compose.yml'), 'utf8')) as { services: { proxy: { command: string[]; volumes: string[] } } };
  const { command, volumes } = compose.services.proxy;
  const source = /^\$\{PROXY_CONFIG:-([^}]+)\}:/.exec(volumes[0]!)![1]!;
  const local: Record<string, string> = {
    '--config': path.join(root, source),
    '--upstream': upstream,
    '--listen': '127.0.0.1:0',
    '--admin': '127.0.0.1:0',
  };
  return command.map((arg, i) => local[command[i - 1]!] ?? arg);
}

before(async () => {
  db = await createTestDatabase();
  upstream = spawn(process.execPath, [path.join(root, 'docker/upstream/server.mjs')], {
    env: { PATH: process.env.PATH, PORT: '0', HOST: '127.0.0.1', DELAY_MS: '300' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const [line] = (await once(upstream.stdout!, 'data')) as [Buffer];
  upstreamUrl = (JSON.parse(line.toString().split('\n')[0]!) as { url: string }).url;
  proxy = await spawnProxy(composeCommand(upstreamUrl), {
    DATABASE_URL: db.url,
    REDIS_URL: 'redis://127.0.0.1:6379',
  });
});

after(async () => {
  await proxy?.stop();
  if (upstream !== undefined && upstream.exitCode === null) {
    upstream.kill('SIGTERM');
    await once(upstream, 'exit');
  }
  await db?.drop();
});

test('verify through the compose proxy: one execution; against the demo upstream: duplicates', async () => {
  const through = await cliInProcess(['verify', '--url', `${proxy.url}/v1/payments`, '-d', '{"amount":100}', '-n', '8', '--max-retry-wait', '1s', '--json']);
  assert.equal(through.code, 0, through.stdout + through.stderr);
  assert.equal(JSON.parse(through.stdout).executions, 1);
  const bare = await cliInProcess(['verify', '--url', `${upstreamUrl}/v1/payments`, '-d', '{"amount":100}', '-n', '4', '--json']);
  assert.equal(bare.code, 1, bare.stdout + bare.stderr);
  assert.equal(JSON.parse(bare.stdout).executions, 4);
});

test('the compose healthcheck (the image\'s `healthcheck` command, with the service\'s --admin) passes against the admin listener, fails without one', async () => {
  const compose = parse(readFileSync(path.join(root, 'docker-compose.yml'), 'utf8')) as { services: { proxy: { healthcheck: { test: string[] } } } };
  const [kind, node, script, ...args] = compose.services.proxy.healthcheck.test;
  assert.equal(kind, 'CMD');
  assert.equal(node, 'node');
  const dockerfile = readFileSync(path.join(root, 'Dockerfile'), 'utf8').replace(/\\\n/g, ' ');
  const image = JSON.parse(/^HEALTHCHECK .*?CMD (\[.*\])\s*$/m.exec(dockerfile)![1]!) as string[];
  assert.deepEqual([node, script, ...args].slice(0, image.length), image, 'the image\'s command, plus flags');
  const run = async (admin: string): Promise<number | null> => {
    const local: Record<string, string> = { '--config': composeCommand(upstreamUrl)[2]!, '--admin': admin };
    const p = spawn(process.execPath, [MAIN, ...args.map((arg, i) => local[args[i - 1]!] ?? arg)], { stdio: 'ignore' });
    const [code] = await once(p, 'exit');
    return code as number | null;
  };
  assert.equal(script, 'dist/src/main.js');
  assert.equal(await run(new URL(proxy.adminUrl!).host), 0);
  assert.equal(await run(`127.0.0.1:${await closedPort()}`), 1);
});
