import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { freePort } from '../../../tools/local-servers.js';
import { waitUntil } from './wait.js';
import net from 'node:net';

// A throwaway redis-server on its own port (no persistence), so a test may
// stop it or FLUSHALL it without touching the machine's shared Redis.

export interface ThrowawayRedis {
  readonly url: string;
  readonly port: number;
  /** Sends one command (inline protocol) and returns the first reply line. */
  command(...args: string[]): Promise<string>;
  stop(): Promise<void>;
  start(): Promise<void>;
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => s.write('PING\r\n'));
    s.on('data', (d) => { s.destroy(); resolve(d.toString().startsWith('+PONG')); });
    s.on('error', () => resolve(false));
  });
}

export async function startThrowawayRedis(): Promise<ThrowawayRedis> {
  const port = await freePort();
  let proc: ChildProcess | null = null;
  const start = async (): Promise<void> => {
    proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    await waitUntil(() => ping(port), 5000, 'redis-server to answer PING');
  };
  const stop = async (): Promise<void> => {
    const p = proc;
    proc = null;
    if (p === null || p.exitCode !== null) return;
    p.kill('SIGKILL');
    await once(p, 'exit');
  };
  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    command: (...args) => new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => s.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`));
      s.on('data', (d) => { s.destroy(); resolve(d.toString().split('\r\n')[0]!); });
      s.on('error', reject);
    }),
    stop,
    start,
  };
}
