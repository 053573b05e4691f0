import type { Argv } from 'yargs';
import { loadConfig } from '../config/load.js';
import type { Config } from '../config/types.js';
import type { CliIo } from './io.js';

export interface CommonArgs {
  config?: string;
  'database-url'?: string;
}

/** The configuration of a command: the file (if any), flags, environment. */
export function commandConfig(args: CommonArgs & { upstream?: string; listen?: string; admin?: string; 'redis-url'?: string; 'log-level'?: string }, io: CliIo): Config {
  return loadConfig({
    file: args.config ?? null,
    flags: {
      upstream: args.upstream ?? null,
      listen: args.listen ?? null,
      admin: args.admin ?? null,
      databaseUrl: args['database-url'] ?? null,
      redisUrl: args['redis-url'] ?? null,
      logLevel: args['log-level'] ?? null,
    },
    env: io.env,
  });
}

/** For commands that only need the store: an upstream is not required. */
export function storeConfig(args: CommonArgs, io: CliIo): Config {
  return loadConfig({
    file: args.config ?? null,
    flags: { databaseUrl: args['database-url'] ?? null, upstream: args.config ? null : 'http://127.0.0.1:1', admin: false },
    env: io.env,
  });
}

export function withServeFlags<T>(y: Argv<T>) {
  return y
    .option('upstream', { type: 'string', describe: 'upstream URL (overrides upstream.url)' })
    .option('listen', { type: 'string', describe: 'address to listen on, host:port (overrides listen)' })
    .option('admin', { type: 'string', describe: 'admin address host:port, or "off" (overrides admin)' })
    .option('redis-url', { type: 'string', describe: 'Redis URL for the lookaside cache (beats the file, which beats REDIS_URL)' })
    .option('log-level', { type: 'string', describe: 'fatal | error | warn | info | debug | trace | silent' });
}
