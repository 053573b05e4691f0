import type { CommandModule } from 'yargs';
import type { CliIo } from './io.js';
import type { Outcome } from './index.js';
import { storeConfig, type CommonArgs } from './options.js';

export function migrateCommand(io: CliIo, _outcome: Outcome): CommandModule<CommonArgs, CommonArgs> {
  return {
    command: 'migrate',
    describe: 'Apply schema migrations to the key store (safe to run from several instances at once)',
    handler: async (args) => {
      const config = storeConfig(args, io);
      const [{ createLogger }, { openDb }, { migrate }] = await Promise.all([
        import('../log/logger.js'), import('../store/open.js'), import('../store/migrate.js'),
      ]);
      const db = await openDb(config.store, createLogger('silent'));
      try {
        const r = await migrate(db);
        io.stdout.write(r.applied.length === 0
          ? `schema is up to date (version ${r.version}) on ${db.description}\n`
          : `applied ${r.applied.map((m) => `${m.version}_${m.name}`).join(', ')}; schema version ${r.version} on ${db.description}\n`);
        if (r.distributed.length > 0) io.stdout.write(`citus: distributed ${r.distributed.join(', ')} (docs/scale.md)\n`);
      } finally {
        await db.close();
      }
    },
  };
}
