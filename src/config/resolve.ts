// The validated tree + command-line flags + environment → Config.
// Precedence (docs/contract.md, Command line): flag beats file beats environment. DATABASE_URL and
// REDIS_URL are used when the file does not set store.postgres / store.redis
// or sets them to an empty value (e.g. an unset ${VAR}).

import type { Config, LimitsConfig, ListenTimeouts, OtlpProtocol, StoreConfig, TracingConfig, UpstreamConfig } from './types.js';
import type { Env } from './interpolate.js';
import type { Issues, Path } from './issues.js';
import { checkStoreUrl, parseHostPort, parseUpstreamUrl, type HostPort } from './addresses.js';
import { isRecord } from './policy-layer.js';
import { resolveRoutes } from './routes.js';
import { formatDuration, parseDuration, parseSize, timedDurationIssue } from './units.js';
import { checkClientCertTenants, LISTEN_TIMEOUT_DEFAULTS, listenAddress, resolveHttp2, resolveListenTls, resolveUpstreamTls } from './listen.js';

/** Command-line overrides. Unset or empty means "not given". */
export interface ConfigFlags {
  readonly upstream?: string | null;
  readonly listen?: string | null;
  /** `false`, "false" or "off" disables the admin listener. */
  readonly admin?: string | false | null;
  readonly databaseUrl?: string | null;
  readonly redisUrl?: string | null;
  readonly logLevel?: string | null;
}

export const LOG_LEVELS: readonly string[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

const DEFAULTS = {
  listen: '0.0.0.0:8080',
  admin: '127.0.0.1:9090',
  upstreamTimeoutMs: 30_000,
  connections: 128,
  dataDir: '.idempotency-proxy/data',
  poolSize: 10,
  storeIdleTimeoutMs: 300_000,
  sweepIntervalMs: 60_000,
  sweepBatchSize: 1_000,
  storeTimeoutMs: 5_000,
  logLevel: 'info',
  shutdownTimeoutMs: 30_000,
  maxBufferedBytes: 256 * 1024 * 1024,
} as const;

type Raw = Record<string, unknown>;

interface Sourced<T> {
  readonly value: T;
  readonly path: Path;
}

const given = (value: unknown): value is string => typeof value === 'string' && value !== '';

/** The first non-empty string among (value, path) candidates. */
function first(...candidates: readonly [unknown, Path][]): Sourced<string> | undefined {
  for (const [value, path] of candidates) if (given(value)) return { value, path };
  return undefined;
}

function hostPort(source: Sourced<string>, defaultHost: string, issues: Issues): HostPort | undefined {
  const parsed = parseHostPort(source.value, defaultHost);
  if (!parsed.ok) issues.add(source.path, parsed.error);
  return parsed.ok ? parsed.value : undefined;
}

const isOff = (value: unknown): boolean => value === false || value === 'false' || value === 'off';

function resolveAdmin(raw: Raw, flags: ConfigFlags, issues: Issues): Config['admin'] {
  if (flags.admin !== undefined && flags.admin !== null && flags.admin !== '') {
    if (isOff(flags.admin)) return null;
    return hostPort({ value: String(flags.admin), path: ['--admin'] }, '127.0.0.1', issues) ?? null;
  }
  if ('admin' in raw) {
    if (raw.admin === null || isOff(raw.admin)) return null;
    if (raw.admin === true) {
      issues.add(['admin'], 'must be "host:port", or false to disable the admin listener');
      return null;
    }
    if (typeof raw.admin !== 'string') return null; // reported by the schema
    if (raw.admin === '') {
      issues.add(['admin'], 'is empty: give "host:port", or false to disable the admin listener');
      return null;
    }
    return hostPort({ value: raw.admin, path: ['admin'] }, '127.0.0.1', issues) ?? null;
  }
  return hostPort({ value: DEFAULTS.admin, path: ['admin'] }, '127.0.0.1', issues) ?? null;
}

function resolveAdminToken(raw: Raw, issues: Issues): string | null {
  if (typeof raw.adminToken !== 'string') return null;
  if (raw.adminToken === '') {
    // Fail closed: an unset ${ADMIN_TOKEN} must not silently open the admin API.
    issues.add(['adminToken'], 'is empty (is its variable unset?); remove the field to run the admin listener without a token');
    return null;
  }
  return raw.adminToken;
}

function duration(raw: Raw, field: string, base: Path, fallback: number, issues: Issues): number {
  const value = raw[field];
  if (typeof value !== 'string' && typeof value !== 'number') return fallback;
  try {
    const ms = parseDuration(value);
    const issue = timedDurationIssue(ms);
    if (issue !== null) issues.add([...base, field], issue);
    return ms;
  } catch (error) {
    issues.add([...base, field], (error as Error).message);
    return fallback;
  }
}

const integer = (value: unknown, fallback: number): number => (Number.isInteger(value) ? (value as number) : fallback);

function resolveUpstream(raw: Raw, flags: ConfigFlags, issues: Issues): UpstreamConfig {
  const section = isRecord(raw.upstream) ? raw.upstream : {};
  const source = first([flags.upstream, ['--upstream']], [section.url, ['upstream', 'url']]);
  let url = '';
  if (source === undefined) {
    issues.add(['upstream', 'url'], 'is required: set upstream.url in the file or pass --upstream');
  } else {
    const parsed = parseUpstreamUrl(source.value);
    if (parsed.ok) url = parsed.value;
    else issues.add(source.path, parsed.error);
  }
  return {
    url,
    timeoutMs: duration(section, 'timeout', ['upstream'], DEFAULTS.upstreamTimeoutMs, issues),
    connections: integer(section.connections, DEFAULTS.connections),
    keepAliveTimeoutMs: section.keepAliveTimeout == null ? null : duration(section, 'keepAliveTimeout', ['upstream'], 0, issues),
    tls: resolveUpstreamTls(section, url, issues),
  };
}

function resolveListenTimeouts(raw: Raw, issues: Issues): ListenTimeouts {
  const d = LISTEN_TIMEOUT_DEFAULTS;
  if (!isRecord(raw.listen)) return d;
  const section = raw.listen;
  const t: ListenTimeouts = {
    headersTimeoutMs: duration(section, 'headersTimeout', ['listen'], d.headersTimeoutMs, issues),
    requestTimeoutMs: duration(section, 'requestTimeout', ['listen'], d.requestTimeoutMs, issues),
    keepAliveTimeoutMs: duration(section, 'keepAliveTimeout', ['listen'], d.keepAliveTimeoutMs, issues),
    sendTimeoutMs: duration(section, 'sendTimeout', ['listen'], d.sendTimeoutMs, issues),
  };
  // Node refuses a headers timeout longer than the request timeout, which counts from the same moment.
  if (t.headersTimeoutMs > t.requestTimeoutMs) {
    const field = section.headersTimeout !== undefined ? 'headersTimeout' : 'requestTimeout';
    issues.add(['listen', field], `listen.headersTimeout (${formatDuration(t.headersTimeoutMs)}) must not be longer than listen.requestTimeout (${formatDuration(t.requestTimeoutMs)}): the whole request includes its headers`);
  }
  return t;
}

function storeUrl(candidates: readonly [unknown, Path][], protocols: readonly string[], issues: Issues): string | null {
  const source = first(...candidates);
  if (source === undefined) return null;
  const checked = checkStoreUrl(source.value, protocols);
  if (!checked.ok) issues.add(source.path, checked.error);
  return checked.ok ? checked.value : null;
}

function resolveStore(raw: Raw, flags: ConfigFlags, env: Env, issues: Issues): StoreConfig {
  const section = isRecord(raw.store) ? raw.store : {};
  return {
    postgres: storeUrl(
      [[flags.databaseUrl, ['--database-url']], [section.postgres, ['store', 'postgres']], [env.DATABASE_URL, ['$DATABASE_URL']]],
      ['postgres:', 'postgresql:'],
      issues,
    ),
    redis: storeUrl(
      [[flags.redisUrl, ['--redis-url']], [section.redis, ['store', 'redis']], [env.REDIS_URL, ['$REDIS_URL']]],
      ['redis:', 'rediss:'],
      issues,
    ),
    dataDir: typeof section.dataDir === 'string' && section.dataDir !== '' ? section.dataDir : DEFAULTS.dataDir,
    poolSize: integer(section.poolSize, DEFAULTS.poolSize),
    idleTimeoutMs: duration(section, 'idleTimeout', ['store'], DEFAULTS.storeIdleTimeoutMs, issues),
    migrate: typeof section.migrate === 'boolean' ? section.migrate : true,
    sweepIntervalMs: duration(section, 'sweepInterval', ['store'], DEFAULTS.sweepIntervalMs, issues),
    sweepBatchSize: integer(section.sweepBatchSize, DEFAULTS.sweepBatchSize),
    // Store hardening (docs/configuration.md).
    timeoutMs: duration(section, 'timeout', ['store'], DEFAULTS.storeTimeoutMs, issues),
    preparedStatements: typeof section.preparedStatements === 'boolean' ? section.preparedStatements : true,
    shardRouting: typeof section.shardRouting === 'boolean' ? section.shardRouting : true,
  };
}

function resolveLimits(raw: Raw, issues: Issues): LimitsConfig {
  const section = isRecord(raw.limits) ? raw.limits : {};
  const value = section.maxBufferedBytes;
  if (typeof value !== 'string' && typeof value !== 'number') return { maxBufferedBytes: DEFAULTS.maxBufferedBytes };
  try {
    const bytes = parseSize(value);
    if (bytes === 0) issues.add(['limits', 'maxBufferedBytes'], 'must be larger than 0');
    return { maxBufferedBytes: bytes };
  } catch (error) {
    issues.add(['limits', 'maxBufferedBytes'], (error as Error).message);
    return { maxBufferedBytes: DEFAULTS.maxBufferedBytes };
  }
}

function resolveLogLevel(raw: Raw, flags: ConfigFlags, issues: Issues): string {
  const source = first([flags.logLevel, ['--log-level']], [raw.logLevel, ['logLevel']]);
  if (source === undefined) return DEFAULTS.logLevel;
  if (!LOG_LEVELS.includes(source.value)) {
    // A bad file value is already reported by the schema.
    if (source.path[0] === '--log-level') issues.add(source.path, `must be one of ${LOG_LEVELS.join(', ')} (got ${JSON.stringify(source.value)})`);
    return DEFAULTS.logLevel;
  }
  return source.value;
}

/** Builds the Config; every problem goes to `issues` (the result is unusable if any). */
export function resolveConfig(tree: unknown, flags: ConfigFlags, env: Env, issues: Issues): Config {
  const raw: Raw = isRecord(tree) ? tree : {};
  const address = listenAddress(raw);
  const listenSource = first([flags.listen, ['--listen']], [address.value, address.path]) ?? { value: DEFAULTS.listen, path: ['listen'] };
  if (address.value === '' && !given(flags.listen)) issues.add(address.path, 'is empty (is its variable unset?): give "host:port"');
  const limits = resolveLimits(raw, issues);
  const config: Config = {
    listen: hostPort(listenSource, '0.0.0.0', issues) ?? { host: '0.0.0.0', port: 8080 },
    admin: resolveAdmin(raw, flags, issues),
    adminToken: resolveAdminToken(raw, issues),
    upstream: resolveUpstream(raw, flags, issues),
    store: resolveStore(raw, flags, env, issues),
    limits,
    logLevel: resolveLogLevel(raw, flags, issues),
    shutdownTimeoutMs: duration(raw, 'shutdownTimeout', [], DEFAULTS.shutdownTimeoutMs, issues),
    routes: resolveRoutes(raw.defaults, raw.routes, issues, limits.maxBufferedBytes),
    listenTls: resolveListenTls(raw, issues),
    http2: resolveHttp2(raw),
    listenTimeouts: resolveListenTimeouts(raw, issues),
    tracing: resolveTracing(raw, env, issues),
  };
  checkClientCertTenants(config.routes, config.listenTls, issues);
  return config;
}

// Tracing (docs/configuration.md): the YAML section, else the standard OTEL_* variables.
function resolveTracing(raw: Raw, env: Env, issues: Issues): TracingConfig {
  const section = isRecord(raw.tracing) ? raw.tracing : {};
  let endpoint: string | null = null;
  if (typeof section.endpoint === 'string') {
    const url = URL.canParse(section.endpoint) ? new URL(section.endpoint) : null;
    if (url !== null && (url.protocol === 'http:' || url.protocol === 'https:')) endpoint = section.endpoint;
    else issues.add(['tracing', 'endpoint'], `must be an http:// or https:// URL (the OTLP/HTTP base, as OTEL_EXPORTER_OTLP_ENDPOINT); got ${JSON.stringify(section.endpoint)}`);
  }
  const fromEnv = given(env.OTEL_EXPORTER_OTLP_ENDPOINT) || given(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
  const disabledByEnv = env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true' || env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() === 'none';
  const enabled = typeof section.enabled === 'boolean' ? section.enabled : !disabledByEnv && (endpoint !== null || fromEnv);
  return {
    enabled,
    endpoint,
    serviceName: typeof section.serviceName === 'string' ? section.serviceName : null,
    sampleRatio: typeof section.sampleRatio === 'number' ? section.sampleRatio : null,
    protocol: resolveOtlpProtocol(section, env, enabled ? issues : null),
  };
}

const OTLP_PROTOCOLS: readonly OtlpProtocol[] = ['http/protobuf', 'http/json'];

/** tracing.protocol (the schema checked it), else the standard variables (checked only when tracing is on); grpc is not offered. */
function resolveOtlpProtocol(section: Raw, env: Env, issues: Issues | null): OtlpProtocol {
  if (typeof section.protocol === 'string') return section.protocol as OtlpProtocol;
  const name = given(env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : given(env.OTEL_EXPORTER_OTLP_PROTOCOL) ? 'OTEL_EXPORTER_OTLP_PROTOCOL' : null;
  if (name === null) return 'http/protobuf';
  const v = env[name]!.trim();
  if ((OTLP_PROTOCOLS as readonly string[]).includes(v)) return v as OtlpProtocol;
  issues?.add(['tracing', 'protocol'], `${name}=${v}: expected ${OTLP_PROTOCOLS.join(' or ')} (OTLP over HTTP; grpc is not supported)`);
  return 'http/protobuf';
}
