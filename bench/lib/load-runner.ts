// Starts load.ts in its own process (pinned to the load CPU) and collects its
// JSON answer. Bounded: a run that overstays its duration is killed.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Children } from './children.js';
import type { CannonResult, CannonSpec, LoadGenerator, RssOpenReport, RssSpec } from './types.js';

export interface LoadRunner {
  cannon(spec: CannonSpec): Promise<CannonResult>;
  /** Opens the sockets; resolves with the report while they are still open. */
  openConnections(spec: RssSpec): Promise<{ report: RssOpenReport; close(): Promise<void> }>;
}

const SLACK_MS = 90_000; // warming, key warm-up, process start

/** `generator` goes into every CannonSpec, so each load process uses the one the harness chose. */
export function loadRunner(children: Children, pin: readonly string[], loadScript: string, generator: LoadGenerator): LoadRunner {
  const start = (spec: CannonSpec | RssSpec): ChildProcess => {
    const [file, ...args] = [...pin, process.execPath, loadScript, JSON.stringify(spec)];
    const cp = spawn(file!, args, { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    children.track(cp);
    return cp;
  };
  const killer = (cp: ChildProcess, ms: number): NodeJS.Timeout =>
    setTimeout(() => {
      try {
        if (cp.pid !== undefined) process.kill(-cp.pid, 'SIGKILL');
      } catch {
        // gone
      }
    }, ms);

  return {
    cannon(spec) {
      const cp = start({ ...spec, generator });
      const timer = killer(cp, (spec.durationS + spec.warmupS) * 1000 + SLACK_MS);
      let out = '';
      let err = '';
      cp.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      cp.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      cp.stdin!.end();
      return new Promise((resolve, reject) => {
        cp.once('exit', (code, signal) => {
          clearTimeout(timer);
          const last = out.trim().split('\n').pop() ?? '';
          if (code === 0 && last.startsWith('{')) resolve(JSON.parse(last) as CannonResult);
          else reject(new Error(`load generator failed (code ${String(code)}, signal ${String(signal)}): ${err.trim().slice(-2000)}`));
        });
      });
    },

    openConnections(spec) {
      const cp = start(spec);
      const timer = killer(cp, SLACK_MS * 2);
      let err = '';
      cp.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      const exited = new Promise<void>((resolve) => cp.once('exit', () => resolve()));
      const close = async (): Promise<void> => {
        cp.stdin!.end();
        await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
        clearTimeout(timer);
        try {
          if (cp.pid !== undefined) process.kill(-cp.pid, 'SIGKILL');
        } catch {
          // gone
        }
      };
      return new Promise((resolve, reject) => {
        createInterface({ input: cp.stdout! }).once('line', (line) => {
          try {
            resolve({ report: JSON.parse(line) as RssOpenReport, close });
          } catch (e) {
            void close();
            reject(e as Error);
          }
        });
        void exited.then(() => reject(new Error(`connection holder exited early: ${err.trim().slice(-2000)}`)));
      });
    },
  };
}
