import yargs, { type CommandModule } from 'yargs';
import { ConfigError } from '../config/errors.js';
import { CliError, type CliIo, formatError } from './io.js';
import { serveCommand } from './serve.js';
import { migrateCommand } from './migrate.js';
import { checkConfigCommand } from './check-config.js';
import { keysCommand } from './keys.js';
import { demoCommand } from './demo.js';
import { verifyCommand } from './verify.js';
import { healthcheckCommand } from './healthcheck.js';

export type Outcome = { code: number };

/**
 * How a failure ends the process. The command line or the configuration is
 * wrong (yargs, ConfigError, CliError): exit 2, with the usage hint unless the
 * message already names the field. The command ran and something at run time
 * failed (PostgreSQL unreachable, a data directory that cannot be written):
 * exit 1 and no usage hint, so restart policies and logs do not read it as a
 * bad command line (docs/operations.md, Docker: exit codes).
 */
function failureExit(err: unknown, runtimeCode: number | null, message: string): { code: number; hint: boolean } {
  const usage = runtimeCode === null || err instanceof CliError || err instanceof ConfigError;
  if (!usage) return { code: runtimeCode, hint: false };
  return { code: err instanceof CliError ? err.exitCode : 2, hint: !/^invalid configuration/.test(message) };
}

/** Parses argv, runs one command, and returns the process exit code. */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  const outcome: Outcome = { code: 0 };
  let failure: string | null = null;
  let failed: unknown = null;
  let hint: string | null = null;
  // Set when a command's handler starts: its exit code for a run-time failure.
  let runtimeCode: number | null = null;
  const run = <A, B>(cmd: CommandModule<A, B>, failedCode = 1): CommandModule<A, B> => ({
    ...cmd,
    handler: (args) => {
      runtimeCode = failedCode;
      return cmd.handler(args);
    },
  });
  const parser = yargs([...argv])
    .scriptName('idempotency-proxy')
    .usage('$0 <command> [options]\n\nHTTP reverse proxy that makes retried requests harmless (Idempotency-Key).')
    .option('config', { type: 'string', describe: 'YAML configuration file', global: true })
    .option('database-url', { type: 'string', describe: 'PostgreSQL URL (beats the file, which beats DATABASE_URL); unset -> embedded store', global: true })
    .command(run(serveCommand(io, outcome)))
    .command(run(migrateCommand(io, outcome)))
    .command(run(checkConfigCommand(io, outcome)))
    .command(run(keysCommand(io, outcome)))
    .command(run(demoCommand(io, outcome)))
    .command(run(verifyCommand(io, outcome), 2)) // its 1 means "more than one execution"
    .command(run(healthcheckCommand(io, outcome)))
    .demandCommand(1, 'name a command: serve, migrate, check-config, keys, verify or demo')
    .strict()
    .recommendCommands()
    .help()
    .alias('help', 'h')
    .version()
    .wrap(Math.min(100, process.stdout.columns ?? 100))
    .exitProcess(false)
    .fail((msg, err) => {
      // "Did you mean serve?" comes first; yargs then reports the unknown argument itself.
      if (err == null && msg?.startsWith('Did you mean')) {
        hint = msg;
        return;
      }
      failure = msg ?? formatError(err);
      failed = err;
      // Throw, or yargs goes on to run the handler despite the failed validation.
      throw err ?? new Error(msg);
    });
  try {
    await parser.parseAsync();
  } catch (err) {
    if (failure === null) {
      failure = formatError(err);
      failed = err;
    }
  }
  if (failure === null && hint !== null) failure = hint;
  else if (failure !== null && hint !== null) failure = `${failure}. ${hint}`;
  if (failure !== null) {
    io.stderr.write(`idempotency-proxy: ${failure}\n`);
    const exit = failureExit(failed, runtimeCode, failure);
    if (exit.hint) io.stderr.write('Run "idempotency-proxy --help" for usage.\n');
    return outcome.code === 0 ? exit.code : outcome.code;
  }
  return outcome.code;
}
