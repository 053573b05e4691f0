import type { CommandModule } from 'yargs';
import { CliError, type CliIo } from './io.js';
import type { Outcome } from './index.js';
import type { CommonArgs } from './options.js';

export function checkConfigCommand(io: CliIo, _outcome: Outcome): CommandModule<CommonArgs, CommonArgs & { file?: string }> {
  return {
    command: 'check-config [file]',
    describe: 'Validate a configuration file and print the resolved policy per route',
    builder: (y) => y.positional('file', { type: 'string', describe: 'YAML file (or --config)' }),
    handler: async (args) => {
      const file = args.file ?? args.config;
      if (file === undefined) throw new CliError('check-config needs a file: idempotency-proxy check-config FILE');
      const [{ loadConfig }, { describeConfig }] = await Promise.all([import('../config/load.js'), import('../config/describe.js')]);
      const config = loadConfig({ file, flags: { databaseUrl: args['database-url'] ?? null }, env: io.env });
      io.stdout.write(`${file}: valid\n\n${describeConfig(config)}\n`);
    },
  };
}
