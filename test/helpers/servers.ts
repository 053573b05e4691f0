import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { asPostgresUser, freePort, initCluster, postgresBinDir, postgresOptions, redisServerArgs } from '../../tools/local-servers.js';
import { waitFor } from './wait.js';

// Throwaway PostgreSQL and Redis servers of the test's own (a temp dir, a
// free port), for the tests that stop, kill, pause or flush them. The
// machine's shared servers are never touched.

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

export async function startThrowawayPostgres(): Promise<ThrowawayPostgres> {
  const bin = postgresBinDir();
  if (bin === null) throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (apt-get install postgresql)');
  const dir = mkdtempSync(path.join(tmpdir(), 'idem-pg-'));
  const data = initCluster(bin, dir, { sync: false });
  const pgCtl = (args: string[]): Promise<unknown> => {
    const [cmd, ...prefix] = [...asPostgresUser(), path.join(bin, 'pg_ctl')];
    return run(cmd!, [...prefix, ...args]);
  };
  const port = await freePort();
  const opts = postgresOptions(port, dir, { fsync: 'off', max_connections: '100' }).join(' ');
  let running = false;
  const start = async (): Promise<void> => {
    await pgCtl(['-D', data, '-o', opts, '-l', path.join(dir, 'log'), '-w', '-t', '30', 'start']);
    running = true;
  };
  const stop = async (mode: 'immediate' | 'fast' = 'immediate'): Promise<void> => {
    await pgCtl(['-D', data, '-m', mode, '-w', 'stop']);
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

/** Sends one inline command on a fresh socket; the first reply line, or null. */
export function rawRedisCommand(port: number, command: string, timeoutMs = 500): Promise<string | null> {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let buf = '';
    const done = (v: string | null): void => {
      clearTimeout(t);
      sock.destroy();
      resolve(v);
    };
    const t = setTimeout(() => done(null), timeoutMs);
    sock.on('error', () => done(null));
    sock.on('connect', () => sock.write(`${command}\r\n`));
    sock.on('data', (d) => {
      buf += d.toString();
      const i = buf.indexOf('\r\n');
      if (i !== -1) done(buf.slice(0, i));
    });
  });
}

export interface ThrowawayRedis {
  readonly port: number;
  readonly url: string;
  /** (Re)starts redis-server on the same port and waits until it answers PING. */
  start(): Promise<void>;
  /** SIGKILL, as a crash. */
  kill(): Promise<void>;
  /** SIGSTOP: the connection stays open, nothing answers. */
  pause(): void;
  resume(): void;
  /** One command on this server only (e.g. FLUSHALL): the first reply line, or null. */
  command(cmd: string): Promise<string | null>;
  /** Kills it and deletes its directory. */
  close(): Promise<void>;
}

/** A redis-server child process of this test on a free port (never the shared one). */
export async function startThrowawayRedis(): Promise<ThrowawayRedis> {
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error(`redis-server is not installed or not on PATH (${probe.error?.message ?? probe.stderr}); these tests start their own throwaway redis-server`);
  }
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), 'idem-redis-'));
  let proc: ChildProcess | null = null;
  let paused = false;

  const start = async (): Promise<void> => {
    if (proc !== null && proc.exitCode === null && proc.signalCode === null) return;
    const p = spawn('redis-server', [...redisServerArgs(port, dir), '--loglevel', 'warning'], { stdio: 'ignore' });
    proc = p;
    paused = false;
    await waitFor(`throwaway redis-server on port ${port} to answer PING`, async () => {
      if (p.exitCode !== null) throw new Error(`throwaway redis-server on port ${port} exited with ${p.exitCode}`);
      return (await rawRedisCommand(port, 'PING', 200)) === '+PONG';
    }, 5000, 20);
  };
  const kill = async (): Promise<void> => {
    const p = proc;
    if (p === null || p.exitCode !== null || p.signalCode !== null) return;
    const exited = once(p, 'exit');
    p.kill('SIGKILL');
    await exited;
    paused = false;
  };
  await start();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    start,
    kill,
    pause: () => {
      proc?.kill('SIGSTOP');
      paused = true;
    },
    resume: () => {
      if (paused) proc?.kill('SIGCONT');
      paused = false;
    },
    command: (cmd) => rawRedisCommand(port, cmd),
    close: async () => {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
