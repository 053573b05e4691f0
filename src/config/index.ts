// The configuration layer's public API.
export type * from './types.js';
export { ConfigError } from './errors.js';
export { loadConfig, type LoadConfigOptions } from './load.js';
export { type ConfigFlags, LOG_LEVELS } from './resolve.js';
export { describeConfig } from './describe.js';
export { maskUrl } from './mask.js';
export { parseDuration, parseSize, formatDuration, formatSize } from './units.js';
export { configSchema } from './schema.js';
export { BUILTIN_KEY, BUILTIN_POLICY } from './routes.js';
