import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startProxy, type RunningProxy, type StartOptions } from '../../../src/app.js';
import { loadConfig } from '../../../src/config/load.js';
import { createLogger } from '../../../src/log/logger.js';
import { spawnProxy, type SpawnedProxy } from '../../helpers/proxy.js';

// Proxies for fault tests: in-process (with test-sized server timeouts) and
// spawned through the CLI from a YAML file (for SIGKILL).

export interface FaultProxyOptions {
  readonly upstream: string;
  readonly databaseUrl: string;
  readonly yaml: string;
  readonly redisUrl?: string;
  readonly start?: Omit<StartOptions, 'logger'>;
}

export async function startInProcess(opts: FaultProxyOptions): Promise<RunningProxy> {
  const config = loadConfig({
    text: opts.yaml,
    flags: {
      upstream: opts.upstream,
      listen: '127.0.0.1:0',
      admin: '127.0.0.1:0',
      databaseUrl: opts.databaseUrl,
      redisUrl: opts.redisUrl ?? null,
    },
    env: {},
  });
  const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');
  return startProxy(config, { shutdownDeadlineMs: 3000, ...opts.start, logger });
}

/** Writes the YAML to a temp file and runs `serve` from it as a child process. */
export async function spawnFromYaml(opts: FaultProxyOptions): Promise<SpawnedProxy> {
  const dir = mkdtempSync(path.join(tmpdir(), 'idem-fault-'));
  const file = path.join(dir, 'proxy.yaml');
  writeFileSync(file, opts.yaml);
  try {
    const args = ['serve', '--config', file, '--upstream', opts.upstream, '--listen', '127.0.0.1:0', '--admin', 'off', '--database-url', opts.databaseUrl];
    if (opts.redisUrl !== undefined) args.push('--redis-url', opts.redisUrl);
    return await spawnProxy(args);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** One short-lived connection for assertions (row counts, states, time travel). */
export async function query<R = Record<string, unknown>>(url: string, text: string, values: unknown[] = []): Promise<R[]> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  await c.connect();
  try {
    return (await c.query(text, values)).rows as R[];
  } finally {
    await c.end();
  }
}

export async function rowCount(url: string): Promise<number> {
  const [r] = await query<{ n: number }>(url, 'SELECT count(*)::int AS n FROM idempotency_keys');
  return r!.n;
}

export async function row(url: string, key: string): Promise<{ state: string; attempt: number; status_code: number | null } | undefined> {
  const rows = await query<{ state: string; attempt: number; status_code: number | null }>(url,
    'SELECT state, attempt, status_code FROM idempotency_keys WHERE idem_key = $1', [key]);
  return rows[0];
}
