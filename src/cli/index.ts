import yargs from 'yargs';
import { type CliIo, formatError } from './io.js';
import { serveCommand } from './serve.js';
import { migrateCommand } from './migrate.js';
import { checkConfigCommand } from './check-config.js';
import { keysCommand } from './keys.js';
import { demoCommand } from './demo.js';
import { verifyCommand } from './verify.js';

export type Outcome = { code: number };

/** Parses argv, runs one command, and returns the process exit code. */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  const outcome: Outcome = { code: 0 };
  let failure: string | null = null;
  let hint: string | null = null;
  const parser = yargs([...argv])
    .scriptName('idempotency-proxy')
    .usage('$0 <command> [options]\n\nHTTP reverse proxy that makes retried requests harmless (Idempotency-Key).')
    .option('config', { type: 'string', describe: 'YAML configuration file', global: true })
    .option('database-url', { type: 'string', describe: 'PostgreSQL URL (beats the file, which beats DATABASE_URL); unset -> embedded store', global: true })
    .command(serveCommand(io, outcome))
    .command(migrateCommand(io, outcome))
    .command(checkConfigCommand(io, outcome))
    .command(keysCommand(io, outcome))
    .command(demoCommand(io, outcome))
    .command(verifyCommand(io, outcome))
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
      // Throw, or yargs goes on to run the handler despite the failed validation.
      throw err ?? new Error(msg);
    });
  try {
    await parser.parseAsync();
  } catch (err) {
    failure ??= formatError(err);
  }
  if (failure === null && hint !== null) failure = hint;
  else if (failure !== null && hint !== null) failure = `${failure}. ${hint}`;
  if (failure !== null) {
    io.stderr.write(`idempotency-proxy: ${failure}\n`);
    if (!/^invalid configuration/.test(failure)) io.stderr.write('Run "idempotency-proxy --help" for usage.\n');
    return outcome.code === 0 ? 2 : outcome.code;
  }
  return outcome.code;
}
