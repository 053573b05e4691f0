import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { freePort } from '../../../tools/local-servers.js';

// Redis for the cache tests: the machine's shared Redis (only ever touched
// under a unique key prefix), and throwaway redis-server processes of our
// own for the tests that kill, stop or flush Redis.

export const SHARED_REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const HOW_TO_START =
  'start it with: redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no ' +
  '--dir /var/lib/redis --logfile /var/log/redis/ci.log (or point TEST_REDIS_URL at a Redis you may write to)';

/** A client for assertions on the shared Redis; fails loudly (with the start command) if it is down. */
export async function sharedRedis(): Promise<Redis> {
  const client = new Redis(SHARED_REDIS_URL, { lazyConnect: true, connectTimeout: 2000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.ping();
  } catch (err) {
    client.disconnect();
    throw new Error(`Redis is not reachable at ${SHARED_REDIS_URL} (${(err as Error).message}); ${HOW_TO_START}`);
  }
  return client;
}

/** A key prefix no other test (or person) uses. No `{`/`}` and no glob characters. */
export function uniquePrefix(): string {
  return `idemtest:${Date.now().toString(36)}${randomBytes(4).toString('hex')}:`;
}

/** Deletes this test's keys (and only those) from the shared Redis. */
export async function deletePrefix(client: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
    if (keys.length > 0) await client.del(...keys);
    cursor = next;
  } while (cursor !== '0');
}

export { freePort };

/** Sends one inline command on a fresh socket; the first reply line, or null. */
export function rawCommand(port: number, command: string, timeoutMs = 500): Promise<string | null> {
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
  /** One command on this server only (e.g. FLUSHALL). */
  command(cmd: string): Promise<string | null>;
  close(): Promise<void>;
}

/** A redis-server child process of this test on a free port (never the shared one). */
export async function startThrowawayRedis(): Promise<ThrowawayRedis> {
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error(`redis-server is not installed or not on PATH (${probe.error?.message ?? probe.stderr}); these tests start their own throwaway redis-server`);
  }
  const port = await freePort();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'idem-redis-'));
  let proc: ChildProcess | null = null;
  let paused = false;

  const start = async (): Promise<void> => {
    if (proc !== null && proc.exitCode === null && proc.signalCode === null) return;
    proc = spawn('redis-server', [
      '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--daemonize', 'no', '--dir', dir, '--loglevel', 'warning',
    ], { stdio: 'ignore' });
    paused = false;
    const deadline = Date.now() + 5000;
    while ((await rawCommand(port, 'PING', 200)) !== '+PONG') {
      if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`throwaway redis-server on port ${port} did not start`);
      await new Promise((r) => setTimeout(r, 20));
    }
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
    command: (cmd) => rawCommand(port, cmd),
    close: async () => {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
