// Every process the harness starts goes through here, so that every one of
// them is stopped on the way out: servers run under guard.js (their own
// process group, killed when the guard's stdin closes), load generators run
// in their own process group. stopAll() is awaited on normal exit; killAll()
// is the synchronous last resort for process.on('exit').
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';

export interface ServerHandle {
  readonly name: string;
  readonly pid: number; // the server itself (taskset execs, so the same pid)
  readonly url: string;
  readonly logFile: string;
  alive(): boolean;
  stop(): Promise<void>;
}

export interface StartOptions {
  readonly name: string;
  readonly command: readonly string[]; // e.g. ['taskset','-c','0', node, script, ...args]
  readonly logFile: string;
  readonly env: NodeJS.ProcessEnv;
  readonly cwd: string;
  readonly timeoutMs: number;
  /** Looks at one line of the server's output; returns its URL once it is listening. */
  readonly ready: (line: string) => string | null;
}

export function tail(file: string, lines: number): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

function killGroup(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pid, sig);
  } catch {
    // gone already
  }
}

function waitExit(cp: ChildProcess, ms: number): Promise<boolean> {
  if (cp.exitCode !== null || cp.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(false), ms);
    cp.once('exit', () => {
      clearTimeout(t);
      resolve(true);
    });
  });
}

export class Children {
  readonly #guardScript: string;
  readonly #live = new Map<ChildProcess, number | null>(); // process → group to kill (null: the process itself)

  constructor(guardScript: string) {
    this.#guardScript = guardScript;
  }

  /** Registers a process started elsewhere (a load generator, detached) for cleanup. */
  track(cp: ChildProcess): void {
    if (cp.pid !== undefined) this.#live.set(cp, cp.pid);
    cp.once('exit', () => this.#live.delete(cp));
  }

  async start(opts: StartOptions): Promise<ServerHandle> {
    const guard = spawn(process.execPath, [this.#guardScript, '--log', opts.logFile, '--', ...opts.command], {
      stdio: ['pipe', 'pipe', 'inherit'],
      env: opts.env,
      cwd: opts.cwd,
    });
    this.#live.set(guard, null);
    let pid: number | null = null;
    let exited: string | null = null;
    guard.once('exit', () => {
      this.#live.delete(guard);
      exited ??= 'guard exited';
    });
    createInterface({ input: guard.stdout! }).on('line', (line) => {
      try {
        const msg = JSON.parse(line) as { pid?: number; exit?: number | null; signal?: string | null };
        if (typeof msg.pid === 'number') {
          pid = msg.pid;
          this.#live.set(guard, null);
        }
        if ('exit' in msg) exited = `exited with code ${String(msg.exit)} signal ${String(msg.signal)}`;
      } catch {
        // not ours
      }
    });
    const stop = async (): Promise<void> => {
      guard.stdin?.end();
      if (!(await waitExit(guard, 10_000))) {
        if (pid !== null) killGroup(pid, 'SIGKILL');
        guard.kill('SIGKILL');
        await waitExit(guard, 2_000);
      }
    };
    const deadline = Date.now() + opts.timeoutMs;
    for (;;) {
      if (pid !== null) {
        for (const line of tail(opts.logFile, 200).split('\n')) {
          const url = opts.ready(line);
          if (url !== null) {
            const p: number = pid;
            return { name: opts.name, pid: p, url, logFile: opts.logFile, alive: () => exited === null, stop };
          }
        }
      }
      if (exited !== null || Date.now() > deadline) {
        await stop();
        const why = exited ?? `not listening after ${opts.timeoutMs} ms`;
        throw new Error(`${opts.name} ${why}; last output:\n${tail(opts.logFile, 25)}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  async stopAll(): Promise<void> {
    await Promise.all(
      [...this.#live.keys()].map(async (cp) => {
        const group = this.#live.get(cp);
        cp.stdin?.end(); // a guard stops its server; a connection holder closes its sockets
        if (group !== null && group !== undefined) killGroup(group, 'SIGTERM'); // a load generator
        if (!(await waitExit(cp, 10_000))) {
          if (group !== null && group !== undefined) killGroup(group, 'SIGKILL');
          cp.kill('SIGKILL');
        }
      }),
    );
  }

  /** Synchronous: for process.on('exit'). Guards kill their servers when their stdin closes. */
  killAll(): void {
    for (const [cp, group] of this.#live) {
      if (group !== null) killGroup(group, 'SIGKILL');
      else cp.kill('SIGTERM');
    }
  }
}
