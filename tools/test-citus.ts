// `npm run test:citus`: the store suite and the core concurrency tests against
// a Citus cluster this script starts (a coordinator and two workers, from the
// binaries in CITUS_PG_BIN) and stops. Not part of `npm test` (docs/scale.md).
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { HOW_TO_GET_CITUS, startCitusCluster } from './citus-cluster.js';

const TESTS = [
  'test/store/key-store.test.js',
  'test/store/claim-call.test.js',
  'test/store/statement-plans.test.js',
  'test/store/migrate.test.js',
  'test/store/rolling-upgrade.test.js',
  'test/store/co-commit.test.js',
  'test/store/probe-state.test.js',
  'test/store/tenant-router.test.js',
  'test/core/concurrency.test.js',
  'test/core/store-contention.test.js',
  'test/core/replay.test.js',
  'test/core/retention.test.js',
  'test/core/tenants.test.js',
  'test/core/heartbeat.test.js',
];

async function main(): Promise<number> {
  if (!process.env.CITUS_PG_BIN) {
    process.stderr.write(`test:citus needs a Citus build: ${HOW_TO_GET_CITUS}\n`);
    return 2;
  }
  const dist = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const cluster = await startCitusCluster();
  process.stdout.write(`citus cluster: coordinator ${cluster.url}, nodes on ports ${cluster.ports.join(', ')}\n`);
  try {
    const files = process.argv.length > 2 ? process.argv.slice(2) : TESTS.map((t) => path.join(dist, t));
    const child = spawn(process.execPath, ['--test', '--test-concurrency=1', ...files], {
      stdio: 'inherit',
      env: { ...process.env, TEST_DATABASE_URL: cluster.url, TEST_CITUS_NODES: cluster.ports.join(',') },
    });
    return await new Promise<number>((resolve) => child.on('exit', (code) => resolve(code ?? 1)));
  } finally {
    await cluster.stop();
  }
}

main().then((code) => { process.exitCode = code; }, (err: unknown) => {
  process.stderr.write(`test:citus: ${(err as Error).message}\n`);
  process.exitCode = 1;
});
