import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { freePort, postgresBinDir } from '../../../tools/local-servers.js';

// A throwaway PostgreSQL cluster of the test's own (initdb into a temp dir,
// its own port), so a test may stop and restart it. The machine's shared
// cluster is never touched. initdb refuses to run as root: as root, every
// command runs as the `postgres` OS user.

const run = promisify(execFile);

export interface ThrowawayPostgres {
  readonly url: string;
  readonly port: number;
  /** pg_ctl stop -m <mode> (immediate: like a crash). */
  stop(mode?: 'immediate' | 'fast'): Promise<void>;
  start(): Promise<void>;
  /** Stops the cluster (if running) and deletes its directory. */
  destroy(): Promise<void>;
}

async function osUser(name: string): Promise<{ uid: number; gid: number }> {
  const { stdout: uid } = await run('id', ['-u', name]);
  const { stdout: gid } = await run('id', ['-g', name]);
  return { uid: Number(uid.trim()), gid: Number(gid.trim()) };
}

export async function startThrowawayPostgres(): Promise<ThrowawayPostgres> {
  const bin = postgresBinDir();
  if (bin === null) throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (apt-get install postgresql)');
  const asRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(path.join(tmpdir(), 'idem-pg-'));
  if (asRoot) {
    const pgUser = await osUser('postgres');
    chownSync(dir, pgUser.uid, pgUser.gid);
  }
  const data = path.join(dir, 'data');
  const exec = (cmd: string, args: string[]): Promise<{ stdout: string; stderr: string }> =>
    asRoot ? run('runuser', ['-u', 'postgres', '--', path.join(bin, cmd), ...args]) : run(path.join(bin, cmd), args);
  await exec('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8']);
  const port = await freePort();
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100`;
  let running = false;
  const start = async (): Promise<void> => {
    await exec('pg_ctl', ['-D', data, '-o', opts, '-l', path.join(dir, 'log'), '-w', '-t', '30', 'start']);
    running = true;
  };
  const stop = async (mode: 'immediate' | 'fast' = 'immediate'): Promise<void> => {
    await exec('pg_ctl', ['-D', data, '-m', mode, '-w', 'stop']);
    running = false;
  };
  await start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    stop,
    start,
    async destroy() {
      if (running) await stop('immediate').catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
