import { readFileSync } from 'node:fs';
import { Writable } from 'node:stream';
import { runCli } from '../../src/cli/index.js';
import { send } from '../helpers/http.js';
import { sleep } from '../helpers/wait.js';

// Small helpers for the operations tests: admin requests, log lines of a
// spawned proxy, the CLI in this process. Prometheus text, temp dirs and
// polling are in test/helpers/.

/** GET an admin path; returns status and text. */
export async function admin(url: string, token?: string): Promise<{ status: number; text: string; headers: Record<string, unknown> }> {
  const r = await send(url, { method: 'GET', headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });
  return { status: r.status, text: r.text(), headers: r.headers };
}

export interface LogLine {
  readonly msg?: string;
  readonly level?: string;
  readonly [k: string]: unknown;
}

/** Waits until a JSON log line (from index `from`) satisfies `pred`. */
export async function waitForLine(lines: readonly string[], pred: (l: LogLine) => boolean, timeoutMs = 5000, from = 0): Promise<LogLine> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    for (let i = from; i < lines.length; i++) {
      try {
        const l = JSON.parse(lines[i]!) as LogLine;
        if (pred(l)) return l;
      } catch {
        /* not JSON */
      }
    }
    if (Date.now() > deadline) throw new Error(`no matching log line within ${timeoutMs} ms; lines:\n${lines.slice(from).join('\n')}`);
    await sleep(25);
  }
}

export { repoRoot } from '../helpers/repo.js';

/** Runs the CLI in this process (no child start-up cost); signals are not wired. */
export async function cliInProcess(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  const collect = (): Writable & { text: string } => {
    const w = new Writable({
      write(chunk: Buffer | string, _enc, cb) {
        w.text += chunk.toString();
        cb();
      },
    }) as Writable & { text: string };
    w.text = '';
    return w;
  };
  const stdout = collect();
  const stderr = collect();
  const code = await runCli(args, { env, stdout, stderr, onShutdownSignal: () => {} });
  return { code, stdout: stdout.text, stderr: stderr.text };
}

/** `--help` in this process: yargs prints help with console.log, captured here. */
export async function helpInProcess(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const log = console.log;
  let printed = '';
  console.log = (...parts: unknown[]) => {
    printed += `${parts.join(' ')}\n`;
  };
  try {
    const r = await cliInProcess(args);
    return { ...r, stdout: r.stdout + printed };
  } finally {
    console.log = log;
  }
}
