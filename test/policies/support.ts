import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startProxy, type RunningProxy } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/log/logger.js';
import { send, type Reply } from '../helpers/http.js';

// Small helpers for the policy tests: an in-process proxy whose pino lines a
// test can read, problem bodies, metrics, temp files, waiting for a condition.

export type LogLine = Record<string, unknown> & { msg?: string };

export interface LoggedProxy {
  readonly proxy: RunningProxy;
  /** Every log line written so far, parsed. */
  readonly lines: LogLine[];
}

/** Like startTestProxy, with the proxy's log captured (level info). */
export async function startLoggedProxy(opts: { upstream: string; databaseUrl: string; yaml: string; level?: string }): Promise<LoggedProxy> {
  const lines: LogLine[] = [];
  const destination = {
    write(s: string): void {
      for (const line of s.split('\n')) if (line.trim() !== '') lines.push(JSON.parse(line) as LogLine);
    },
  };
  const config = loadConfig({
    text: opts.yaml,
    flags: { upstream: opts.upstream, listen: '127.0.0.1:0', admin: '127.0.0.1:0', databaseUrl: opts.databaseUrl, redisUrl: null },
    env: {},
  });
  const logger = createLogger(opts.level ?? 'info', destination);
  const proxy = await startProxy(config, { logger, shutdownDeadlineMs: 5000 });
  return { proxy, lines };
}

/** The problem type slug of a problem+json reply. */
export function problemType(r: Reply): string {
  assertProblem(r);
  return String(r.json().type).replace('urn:idempotency-proxy:problem:', '');
}

function assertProblem(r: Reply): void {
  const ct = String(r.headers['content-type'] ?? '');
  if (!ct.startsWith('application/problem+json')) {
    throw new Error(`expected a problem+json reply, got ${r.status} ${ct}: ${r.text().slice(0, 300)}`);
  }
}

export async function metricsText(adminUrl: string | null): Promise<string> {
  if (adminUrl === null) throw new Error('no admin listener');
  return (await send(`${adminUrl}/metrics`, { method: 'GET' })).text();
}

/** The value of one sample line in Prometheus text, or 0 when absent. */
export function sample(text: string, name: string, labels: Record<string, string>): number {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const ok = Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`));
    if (ok) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return 0;
}

export function sha256(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

export interface TempDir {
  readonly dir: string;
  write(name: string, text: string): string;
  remove(): void;
}

export function tempDir(prefix = 'idem-pol-'): TempDir {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  return {
    dir,
    write(name, text) {
      const file = path.join(dir, name);
      writeFileSync(file, text);
      return file;
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** Polls `check` every 20 ms until it returns true, or fails after `ms`. */
export async function until(check: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Peak resident set size (VmHWM) of a process, in bytes. Linux only. */
export function peakRss(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /^VmHWM:\s+(\d+) kB/m.exec(status);
  if (m === null) throw new Error(`no VmHWM in /proc/${pid}/status`);
  return Number(m[1]) * 1024;
}
