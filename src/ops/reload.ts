import type { RunningProxy } from '../app.js';
import { ConfigError } from '../config/errors.js';
import type { Config } from '../config/types.js';

// SIGHUP: re-read the configuration file and swap in its routes for new
// requests. An invalid file changes nothing; the log line lists every error.

export type ReloadOutcome = 'reloaded' | 'unchanged' | 'rejected';

export function reloadFromFile(proxy: RunningProxy, file: string | null, load: () => Config): ReloadOutcome {
  const log = proxy.logger;
  let next: Config;
  try {
    next = load();
  } catch (err) {
    const errors = err instanceof ConfigError ? err.errors : [(err as Error)?.message ?? String(err)];
    log.error({ file, errors }, `configuration reload rejected, the running configuration is kept: ${errors.join('; ')}`);
    return 'rejected';
  }
  let result;
  try {
    result = proxy.reload(next);
  } catch (err) {
    const message = (err as Error)?.message ?? String(err);
    log.error({ file, errors: [message] }, `configuration reload rejected, the running configuration is kept: ${message}`);
    return 'rejected';
  }
  if (result.restartNeeded.length > 0) {
    log.warn({ file, fields: result.restartNeeded },
      `configuration reload: ${result.restartNeeded.join(', ')} changed but only take effect on restart; keeping the running values`);
  }
  if (result.changed.length === 0) {
    log.info({ file, routes: result.routes }, 'configuration reloaded: no live setting changed');
    return 'unchanged';
  }
  log.info({ file, changed: result.changed, routes: result.routes }, 'configuration reloaded: new requests use the new routes');
  return 'reloaded';
}
