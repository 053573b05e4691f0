import { execFile } from 'node:child_process';
import { appendFileSync, chownSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort, postgresBinDir } from '../tools/local-servers.js';

// A primary with a synchronous streaming standby, from Debian's PostgreSQL
// packages: initdb, pg_basebackup, pg_ctl promote — what Patroni or
// pg_auto_failover do, without their control plane. Throwaway clusters in a
// temp dir on their own ports; the machine's cluster is never touched. As
// root every command runs as the `postgres` OS user (initdb refuses root).

const run = promisify(execFile);

export interface Node {
  readonly port: number;
  readonly url: string;
  readonly data: string;
}

export interface SyncPair {
  readonly primary: Node;
  readonly standby: Node;
  /** SIGKILL of the primary's postmaster and every backend of it (a crashed host). */
  killPrimary(): Promise<void>;
  /** pg_ctl promote on the standby; resolves once it accepts writes. */
  promoteStandby(): Promise<void>;
  destroy(): Promise<void>;
}

export async function startSyncPair(): Promise<SyncPair> {
  const bin = postgresBinDir();
  if (bin === null) throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (apt-get install postgresql)');
  const asRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(path.join(tmpdir(), 'idem-failover-'));
  if (asRoot) {
    const { stdout: uid } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    chownSync(dir, Number(uid), Number(gid));
  }
  const exec = (cmd: string, args: string[]): Promise<{ stdout: string }> =>
    asRoot ? run('runuser', ['-u', 'postgres', '--', path.join(bin, cmd), ...args]) : run(path.join(bin, cmd), args);
  const node = (name: string, port: number): Node => ({ port, data: path.join(dir, name), url: `postgres://postgres@127.0.0.1:${port}/postgres` });
  const primary = node('primary', await freePort());
  const standby = node('standby', await freePort());
  const common = '-c listen_addresses=127.0.0.1 -c max_connections=100 -c wal_level=replica';
  // synchronous_standby_names on the command line, not in postgresql.conf:
  // the standby copies the primary's files and, once promoted, must not wait
  // for a standby of its own that does not exist.
  const pgctl = (n: Node, extra: string, args: string[]): Promise<unknown> =>
    exec('pg_ctl', ['-D', n.data, '-o', `-p ${n.port} -k ${dir} ${common} ${extra}`, '-l', `${n.data}.log`, '-w', '-t', '30', ...args]);

  await exec('initdb', ['-D', primary.data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8']);
  await pgctl(primary, "-c synchronous_standby_names='standby1' -c synchronous_commit=on", ['start']);
  await exec('pg_basebackup', ['-h', '127.0.0.1', '-p', String(primary.port), '-U', 'postgres', '-D', standby.data, '-X', 'stream', '-R', '--no-sync']);
  appendFileSync(path.join(standby.data, 'postgresql.auto.conf'),
    `primary_conninfo = 'host=127.0.0.1 port=${primary.port} user=postgres application_name=standby1'\n`);
  await pgctl(standby, '', ['start']);
  await waitSync(primary.url);

  let primaryUp = true;
  let standbyUp = true;
  return {
    primary,
    standby,
    async killPrimary() {
      const pid = Number(readFileSync(path.join(primary.data, 'postmaster.pid'), 'utf8').split('\n')[0]);
      const { stdout } = await run('pgrep', ['-P', String(pid)]).catch(() => ({ stdout: '' }));
      for (const p of [pid, ...stdout.split('\n').filter(Boolean).map(Number)]) {
        try { process.kill(p, 'SIGKILL'); } catch { /* already gone */ }
      }
      primaryUp = false;
    },
    async promoteStandby() {
      await exec('pg_ctl', ['-D', standby.data, '-w', '-t', '30', 'promote']);
    },
    async destroy() {
      if (standbyUp) await exec('pg_ctl', ['-D', standby.data, '-m', 'immediate', '-w', 'stop']).catch(() => {});
      if (primaryUp) await exec('pg_ctl', ['-D', primary.data, '-m', 'immediate', '-w', 'stop']).catch(() => {});
      standbyUp = primaryUp = false;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function waitSync(url: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      const { rows } = await c.query("SELECT 1 FROM pg_stat_replication WHERE application_name = 'standby1' AND sync_state = 'sync'");
      if (rows.length === 1) return;
    } finally {
      await c.end();
    }
    if (Date.now() > deadline) throw new Error('the standby did not become a synchronous standby within 30 s');
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The read-write endpoint: a TCP switch that forwards to one node, switched by the test (HAProxy's job). */
export interface Switch {
  readonly port: number;
  /** New connections go to `port`; open ones are cut. */
  switchTo(port: number): void;
  close(): Promise<void>;
}

export async function startSwitch(initial: number): Promise<Switch> {
  let target = initial;
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target, '127.0.0.1');
    for (const s of [client, upstream]) {
      open.add(s);
      s.on('close', () => open.delete(s));
      s.on('error', () => {});
    }
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as AddressInfo).port,
    switchTo(port) {
      target = port;
      for (const s of open) s.destroy();
    },
    close: () => new Promise<void>((resolve) => {
      for (const s of open) s.destroy();
      server.close(() => resolve());
    }),
  };
}
