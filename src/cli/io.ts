import type { Writable } from 'node:stream';
import { ConfigError } from '../config/errors.js';

export interface CliIo {
  readonly env: NodeJS.ProcessEnv;
  /** node's own options (process.execArgv): `serve` checks NODE_FLAGS (src/node-flags.ts) against them. */
  readonly nodeArgs?: readonly string[];
  readonly stdout: Writable;
  readonly stderr: Writable;
  /** Registers the graceful-shutdown callback (SIGTERM/SIGINT). */
  readonly onShutdownSignal: (fn: (signal: string) => void) => void;
  /** Registers the configuration-reload callback (SIGHUP). Absent: reload is not offered. */
  readonly onReloadSignal?: (fn: () => void) => void;
}

/** A failure the user can act on: printed without a stack, exit code 2. */
export class CliError extends Error {
  constructor(message: string, readonly exitCode = 2) {
    super(message);
  }
}

export function formatError(err: unknown): string {
  if (err instanceof ConfigError) return err.message;
  if (err instanceof CliError) return err.message;
  return (err as Error)?.message ?? String(err);
}
