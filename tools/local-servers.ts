// Helpers shared by the tests (test/helpers/servers.ts) and the benchmark
// (bench/lib/services.ts) for the servers they start themselves on this
// machine, never the machine's shared ones: a free loopback port, where
// PostgreSQL's server binaries are, a fresh cluster's initdb, and the
// command lines of a throwaway postgres and redis-server. Each caller runs
// the processes its own way (pg_ctl for tests that stop and restart a
// cluster; the benchmark's guarded, CPU-pinned children).
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** The newest /usr/lib/postgresql/<version>/bin holding initdb (Debian's layout), or null. */
export function postgresBinDir(): string | null {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => existsSync(path.join(root, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length === 0 ? null : path.join(root, versions[0]!, 'bin');
}

/** initdb and postgres refuse to run as root: as root, they run as the `postgres` OS user (this command prefix). */
export function asPostgresUser(): string[] {
  return process.getuid?.() === 0 ? ['setpriv', '--reuid=postgres', '--regid=postgres', '--init-groups', '--'] : [];
}

/**
 * A fresh cluster in `dir`/data (trust auth, user postgres, UTF8); `dir`
 * belongs to the postgres user when we are root. `sync: false` skips
 * initdb's own fsyncs (tests); the server's fsync setting is the caller's.
 */
export function initCluster(bin: string, dir: string, opts: { sync: boolean }): string {
  const asUser = asPostgresUser();
  if (asUser.length > 0) {
    const id = (flag: string): number => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, id('-u'), id('-g'));
  }
  const data = path.join(dir, 'data');
  const [cmd, ...prefix] = [...asUser, path.join(bin, 'initdb')];
  execFileSync(cmd!, [...prefix, '-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', ...(opts.sync ? [] : ['--no-sync'])], { stdio: 'ignore' });
  return data;
}

/** postgres's own options for a throwaway cluster on `port`, its socket in `socketDir`. */
export function postgresOptions(port: number, socketDir: string, settings: Readonly<Record<string, string>>): string[] {
  return ['-p', String(port), '-k', socketDir, '-c', 'listen_addresses=127.0.0.1', ...Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`])];
}

/** redis-server's arguments for a throwaway instance on `port`: loopback only, no persistence, in the foreground. */
export function redisServerArgs(port: number, dir?: string): string[] {
  return ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no', ...(dir === undefined ? [] : ['--dir', dir])];
}
