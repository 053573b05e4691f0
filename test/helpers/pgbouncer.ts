import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';

// A PgBouncer of the test's own in transaction pooling mode, in front of the
// machine's PostgreSQL (trust auth): what most production stacks put between
// the proxy and the database. Started on a free port, stopped by the test.

export const PGBOUNCER_HOW_TO_INSTALL = 'apt-get update && apt-get install -y pgbouncer';

export interface PgBouncer {
  readonly port: number;
  /** The URL of database `name` through this PgBouncer. */
  url(name: string): string;
  stop(): Promise<void>;
}

function binary(): string {
  for (const p of ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', '/usr/local/bin/pgbouncer']) if (existsSync(p)) return p;
  try {
    return execFileSync('sh', ['-c', 'command -v pgbouncer'], { encoding: 'utf8' }).trim();
  } catch {
    throw new Error(`pgbouncer is not installed; install it with: ${PGBOUNCER_HOW_TO_INSTALL}`);
  }
}

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** PgBouncer refuses to run as root: as root it runs as the postgres user. */
function runAs(dir: string): string[] {
  if (process.getuid?.() !== 0) return [];
  const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }));
  const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }));
  chownSync(dir, uid, gid);
  return ['-u', 'postgres'];
}

/**
 * `target`: the PostgreSQL server URL (its user is the one PgBouncer logs in
 * as). `poolSize`: server connections per database — fewer than the
 * proxy's pool, so statements of one client run on several server connections.
 */
export async function startPgBouncer(target: string, poolSize = 2): Promise<PgBouncer> {
  const bin = binary();
  const t = new URL(target);
  const user = decodeURIComponent(t.username || 'postgres');
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), 'idem-pgbouncer-'));
  writeFileSync(path.join(dir, 'users.txt'), `"${user}" ""\n`);
  writeFileSync(path.join(dir, 'pgbouncer.ini'), [
    '[databases]',
    `* = host=${t.hostname} port=${t.port || 5432}`,
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    'auth_type = trust',
    `auth_file = ${path.join(dir, 'users.txt')}`,
    'pool_mode = transaction',
    `default_pool_size = ${poolSize}`,
    // Every server connection open from the start and taken in turn, not
    // the most recently used first: consecutive statements of one client
    // land on different server connections, as they do on a busy PgBouncer.
    'server_round_robin = 1',
    `min_pool_size = ${poolSize}`,
    'max_client_conn = 500',
    `logfile = ${path.join(dir, 'pgbouncer.log')}`,
    `pidfile = ${path.join(dir, 'pgbouncer.pid')}`,
    '',
  ].join('\n'));
  const child: ChildProcess = spawn(bin, [...runAs(dir), path.join(dir, 'pgbouncer.ini')], { stdio: 'ignore' });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const log = (): string => {
    try {
      return readFileSync(path.join(dir, 'pgbouncer.log'), 'utf8').split('\n').slice(-10).join('\n');
    } catch {
      return '(no log)';
    }
  };
  const url = (name: string): string => `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/${name}`;
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  // Ready once a statement goes through it.
  const deadline = Date.now() + 10_000;
  for (;;) {
    const c = new pg.Client({ connectionString: url('postgres'), connectionTimeoutMillis: 1000 });
    c.on('error', () => {});
    try {
      await c.connect();
      await c.query('SELECT 1');
      await c.end();
      return { port, url, stop };
    } catch (err) {
      await c.end().catch(() => {});
      if (child.exitCode !== null || Date.now() > deadline) {
        const why = `PgBouncer did not start on port ${port} (${(err as Error).message}); its log:\n${log()}`;
        await stop();
        throw new Error(why);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
