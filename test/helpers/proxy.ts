import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { startProxy, type RunningProxy, type StartOptions } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';
import { createLogger, type Logger } from '../../src/log/logger.js';
import { tempDir } from './tmp.js';

// Two ways to run the proxy in tests: in-process (fast, for most tests) and
// as a real child process through the CLI (for crashes, signals, and two
// instances sharing one database). Every test starts its proxies here.

const here = path.dirname(fileURLToPath(import.meta.url));
/** dist/src/main.js, from dist/test/helpers/. */
export const MAIN = path.resolve(here, '../../src/main.js');

export interface InProcessOptions {
  readonly upstream: string;
  readonly databaseUrl: string | null;
  /** YAML; listen/admin/upstream/store may be left out. */
  readonly yaml?: string;
  /** A Redis URL; null or left out: no cache. */
  readonly redisUrl?: string | null;
  readonly dataDir?: string;
  readonly env?: Record<string, string>;
  readonly logLevel?: string;
  /** A logger of the test's own (e.g. writing to a stream the test reads); wins over logLevel. */
  readonly logger?: Logger;
  /** Start-up options beside the config (cache tuning, server timeouts, shutdown deadline: 5 s unless given). */
  readonly start?: Omit<StartOptions, 'logger'>;
}

/** Starts the proxy in this process on 127.0.0.1:0 (admin too). */
export async function startTestProxy(opts: InProcessOptions): Promise<RunningProxy> {
  let yaml = opts.yaml ?? '';
  if (opts.dataDir !== undefined) yaml = `${yaml}\nstore: { dataDir: ${JSON.stringify(opts.dataDir)} }\n`;
  const config = loadConfig({
    text: yaml,
    flags: {
      upstream: opts.upstream,
      listen: '127.0.0.1:0',
      admin: '127.0.0.1:0',
      databaseUrl: opts.databaseUrl ?? null,
      redisUrl: opts.redisUrl ?? null,
    },
    env: { ...(opts.env ?? {}) },
  });
  const logger = opts.logger ?? createLogger(opts.logLevel ?? process.env.TEST_LOG_LEVEL ?? 'silent');
  return startProxy(config, { shutdownDeadlineMs: 5000, ...opts.start, logger });
}

export type LogLine = Record<string, unknown> & { msg?: string };

export interface LoggedProxy {
  readonly proxy: RunningProxy;
  /** Every log line written so far, parsed. */
  readonly lines: LogLine[];
}

/** startTestProxy with the proxy's log captured (level info unless given). */
export async function startLoggedProxy(opts: Omit<InProcessOptions, 'logger' | 'logLevel'> & { level?: string }): Promise<LoggedProxy> {
  const lines: LogLine[] = [];
  const destination = {
    write(s: string): void {
      for (const line of s.split('\n')) if (line.trim() !== '') lines.push(JSON.parse(line) as LogLine);
    },
  };
  const proxy = await startTestProxy({ ...opts, logger: createLogger(opts.level ?? 'info', destination) });
  return { proxy, lines };
}

export interface SpawnedProxy {
  readonly url: string;
  readonly adminUrl: string | null;
  readonly proc: ChildProcess;
  /** Every stdout line so far (pino JSON). */
  readonly lines: string[];
  /** SIGTERM and wait for exit; returns the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL (a crash) and wait for exit. */
  kill(): Promise<void>;
}

/**
 * Runs `idempotency-proxy <args>` as a child process and waits for its
 * "proxy listening" line. Pass --listen 127.0.0.1:0 to get a free port.
 */
export async function spawnProxy(args: string[], env: NodeJS.ProcessEnv = {}, opts: { cwd?: string; nodeArgs?: readonly string[] } = {}): Promise<SpawnedProxy> {
  const proc = spawn(process.execPath, [...(opts.nodeArgs ?? []), MAIN, ...args], {
    env: { PATH: process.env.PATH, ...env },
    ...(opts.cwd === undefined ? {} : { cwd: opts.cwd }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  let stderr = '';
  let buf = '';
  proc.stderr!.on('data', (d: Buffer) => { stderr += d.toString(); });
  const listening = new Promise<{ url: string; adminUrl: string | null }>((resolve, reject) => {
    proc.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      let i;
      while ((i = buf.indexOf('\n')) !== -1) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        lines.push(line);
        try {
          const j = JSON.parse(line) as { msg?: string; url?: string; adminUrl?: string | null };
          if (j.msg === 'proxy listening') resolve({ url: j.url!, adminUrl: j.adminUrl ?? null });
        } catch {
          /* not JSON */
        }
      }
    });
    proc.once('exit', (code) => reject(new Error(`proxy exited with ${code} before listening:\n${stderr}\n${lines.join('\n')}`)));
  });
  const timeout = setTimeout(() => proc.kill('SIGKILL'), 30_000);
  try {
    const { url, adminUrl } = await listening;
    const exited = once(proc, 'exit');
    return {
      url,
      adminUrl,
      proc,
      lines,
      async stop() {
        if (proc.exitCode !== null) return proc.exitCode;
        proc.kill('SIGTERM');
        const [code] = await exited;
        return code as number | null;
      },
      async kill() {
        if (proc.exitCode !== null || proc.signalCode !== null) return;
        proc.kill('SIGKILL');
        await exited;
      },
    };
  } finally {
    clearTimeout(timeout);
  }
}

/** Runs the CLI to completion; returns exit code and output. */
export async function runCli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = spawn(process.execPath, [MAIN, ...args], { env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
  proc.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
  const [code] = await once(proc, 'exit');
  return { code: code as number | null, stdout, stderr };
}

/** Writes the YAML to a temp file and runs `serve` from it as a child process (no admin listener). */
export async function spawnFromYaml(opts: { upstream: string; databaseUrl: string; yaml: string; redisUrl?: string }): Promise<SpawnedProxy> {
  const dir = tempDir('idem-spawn-');
  const file = dir.write('proxy.yaml', opts.yaml);
  try {
    const args = ['serve', '--config', file, '--upstream', opts.upstream, '--listen', '127.0.0.1:0', '--admin', 'off', '--database-url', opts.databaseUrl];
    if (opts.redisUrl !== undefined) args.push('--redis-url', opts.redisUrl);
    return await spawnProxy(args);
  } finally {
    dir.remove();
  }
}
