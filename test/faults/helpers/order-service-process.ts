import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { waitFor as poll } from '../../helpers/wait.js';

// Starts order-service.ts as a child process on a database and steers it.

const SCRIPT = fileURLToPath(new URL('./order-service.js', import.meta.url));

export interface OrderEvent {
  readonly event: 'listening' | 'received' | 'paused' | 'settle' | 'committed' | 'rolled-back' | 'closed' | 'error';
  readonly key?: string;
  readonly claim?: string | null;
  readonly result?: boolean | null;
  readonly body?: string;
  readonly port?: number;
  readonly message?: string;
}

export interface OrderMode {
  readonly settle?: boolean;
  readonly after?: 'answer' | 'hold' | 'raise-hold';
  readonly pauseBeforeSettle?: boolean;
  readonly delayMs?: number;
}

export interface OrderService {
  readonly url: string;
  readonly proc: ChildProcess;
  readonly events: OrderEvent[];
  /** The first event (past or future) that matches. */
  waitFor(match: (e: OrderEvent) => boolean, what: string, timeoutMs?: number): Promise<OrderEvent>;
  mode(m: OrderMode): Promise<void>;
  /** Lets every request paused before its settle go on, or only the one of `claim`. */
  release(claim?: string): Promise<void>;
  close(): Promise<void>;
}

export async function startOrderService(databaseUrl: string): Promise<OrderService> {
  const proc = spawn(process.execPath, [SCRIPT], {
    env: { PATH: process.env.PATH, DATABASE_URL: databaseUrl, IDEM_ORDER_SERVICE: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const events: OrderEvent[] = [];
  let buf = '';
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => { stderr += d.toString(); });
  proc.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) !== -1) {
      events.push(JSON.parse(buf.slice(0, i)) as OrderEvent);
      buf = buf.slice(i + 1);
    }
  });
  const exited = once(proc, 'exit');
  const waitFor = (match: (e: OrderEvent) => boolean, what: string, timeoutMs = 10_000): Promise<OrderEvent> =>
    poll(what, () => {
      if (proc.exitCode !== null) throw new Error(`order service exited (${proc.exitCode}): ${stderr}`);
      return events.find(match);
    }, timeoutMs, 10);
  const ready = await waitFor((e) => e.event === 'listening', 'the order service to listen');
  const url = `http://127.0.0.1:${ready.port}`;
  const post = async (path: string, body: unknown): Promise<void> => {
    const r = await request(`${url}${path}`, { method: 'POST', body: JSON.stringify(body) });
    await r.body.dump();
  };
  return {
    url,
    proc,
    events,
    waitFor,
    mode: (m) => post('/_test/mode', m),
    release: (claim) => post('/_test/release', claim === undefined ? {} : { claim }),
    async close() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill('SIGTERM');
      await exited;
    },
  };
}
