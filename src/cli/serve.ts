import type { CommandModule } from 'yargs';
import type { CliIo } from './io.js';
import type { Outcome } from './index.js';
import { commandConfig, withServeFlags, type CommonArgs } from './options.js';
import { missingNodeFlags, NODE_FLAGS } from '../node-flags.js';

interface ServeArgs extends CommonArgs {
  upstream?: string;
  listen?: string;
  admin?: string;
  'redis-url'?: string;
  'log-level'?: string;
}

export function serveCommand(io: CliIo, outcome: Outcome): CommandModule<CommonArgs, ServeArgs> {
  return {
    command: 'serve',
    describe: 'Run the proxy (without a file, --upstream alone is enough); SIGHUP reloads routes, SIGTERM drains',
    builder: (y) => withServeFlags(y)
      .example('$0 serve --upstream http://127.0.0.1:3000', 'embedded store, every POST/PATCH with an Idempotency-Key deduplicated')
      .example('$0 serve --config config/payments.yaml --database-url postgres://...', 'production-like'),
    handler: async (args) => {
      const config = commandConfig(args, io);
      // Loaded here, not at the top: `--help`, `check-config` and the other
      // commands do not pay for the proxy's modules (undici, pg, ioredis, ...).
      const [{ startProxy }, { reloadFromFile }] = await Promise.all([import('../app.js'), import('../ops/reload.js')]);
      const proxy = await startProxy(config);
      // The signal handlers first, in the same tick as "proxy listening":
      // until they are registered, SIGTERM ends the process at once
      // (src/startup-signals.ts; also when node is a container's PID 1).
      let stopping = false;
      const stopped = new Promise<void>((resolve) => {
        io.onShutdownSignal((signal) => {
          stopping = true;
          proxy.logger.info({ signal }, 'shutting down: no new connections, finishing in-flight requests');
          proxy.close().then(() => {
            proxy.logger.info('shutdown complete');
            proxy.logger.flush();
            resolve();
          }, (err: Error) => {
            proxy.logger.error({ err: err.message }, 'shutdown failed');
            outcome.code = 1;
            resolve();
          });
        });
      });
      io.onReloadSignal?.(() => {
        if (stopping) return;
        proxy.logger.info({ file: args.config ?? null }, 'SIGHUP: reloading the configuration');
        reloadFromFile(proxy, args.config ?? null, () => commandConfig(args, io));
      });
      const missing = missingNodeFlags(io.nodeArgs ?? [], io.env['NODE_OPTIONS']);
      if (missing.length > 0) {
        proxy.logger.info({ missing, hint: `node ${NODE_FLAGS.join(' ')} dist/src/main.js serve, or NODE_OPTIONS="${NODE_FLAGS.join(' ')}"` },
          'node started without the recommended heap options: peak memory is higher (docs/operations.md, Sizing)');
      }
      await stopped;
    },
  };
}
