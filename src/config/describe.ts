// The resolved configuration as text, for `check-config`: every route's
// effective policy with durations and sizes human-readable. Secrets (database
// and Redis passwords, the admin token) are never printed.

import type { Config, KeySource, RoutePolicy, TenantSource } from './types.js';
import { maskUrl } from './mask.js';
import { formatDuration, formatSize } from './units.js';

const address = (a: { host: string; port: number }): string =>
  `${a.host.includes(':') ? `[${a.host}]` : a.host}:${a.port}`;

/** TLS / mTLS / HTTP/2 of the listener, as a suffix (docs/configuration.md, Listener). */
const listenExtras = (c: Config): string => {
  const parts = [c.listenTls === null ? '' : c.listenTls.clientCa === null ? 'TLS' : 'TLS with client certificates (mTLS)', c.http2 ? 'HTTP/2 and HTTP/1.1' : ''];
  const shown = parts.filter((p) => p !== '');
  return shown.length === 0 ? '' : ` (${shown.join(', ')})`;
};

function clientsText(c: Config): string {
  const t = c.listenTimeouts;
  return `headers within ${formatDuration(t.headersTimeoutMs)}, the whole request within ${formatDuration(t.requestTimeoutMs)}; ` +
    `idle connections kept ${formatDuration(t.keepAliveTimeoutMs)}; a client that reads nothing cut off after ${formatDuration(t.sendTimeoutMs)}`;
}

function table(rows: readonly (readonly [string, string])[], indent = '  '): string[] {
  const width = Math.max(...rows.map(([label]) => label.length));
  return rows.map(([label, value]) => `${indent}${label.padEnd(width)}  ${value}`);
}

function keyText(key: KeySource, required: boolean): string {
  const where =
    key.kind === 'fromBody' ? `body field ${key.pointer} (JSON Pointer)` : `header ${key.header}`;
  if (key.kind === 'fromBody') return `${where}, always required (a body without it, or not JSON, gets 400)`;
  return `${where}${required ? ', required (400 without it)' : ', optional (forwarded without deduplication when absent)'}`;
}

function tenantText(tenant: TenantSource): string {
  switch (tenant.kind) {
    case 'fromHeader':
      return `header ${tenant.header}`;
    case 'fromHeaderHash':
      return `SHA-256 of header ${tenant.header}`;
    case 'constant':
      return `constant ${JSON.stringify(tenant.value)}`;
    case 'fromClientCert':
      return 'subject of the verified client certificate (RFC 4514)';
  }
}

function fingerprintText(route: RoutePolicy): string {
  const fp = route.fingerprint;
  const parts = ['method', 'path'];
  if (fp.query) parts.push('query');
  if (fp.headers.length > 0) parts.push(`headers ${fp.headers.join(', ')}`);
  if (fp.json === 'raw') parts.push('body (raw bytes)');
  else parts.push(`body (canonical JSON${fp.exclude.length > 0 ? `, ignoring ${fp.exclude.join(', ')}` : ''})`);
  return parts.join(', ');
}

function storedHeadersText(route: RoutePolicy): string {
  let text = 'end-to-end headers except date, set-cookie, hop-by-hop, framing and request ids';
  if (route.storeHeaders.length > 0) text += `; plus ${route.storeHeaders.join(', ')}`;
  if (route.dropHeaders.length > 0) text += `; minus ${route.dropHeaders.join(', ')}`;
  return text;
}

const ERROR_FORMATS: Readonly<Record<RoutePolicy['errorFormat'], string>> = {
  problem: 'application/problem+json (RFC 9457) with instance, retryable, idempotency_key',
  stripe: 'Stripe {"error":{type,code,message}}, Stripe-Should-Retry on every answer the proxy makes',
  acp: 'ACP flat {type,code,message}',
};

/** The row's value, marked with the profile when its preset gave one of `fields` (YAML names). */
function byProfile(route: RoutePolicy, fields: readonly string[], text: string): string {
  const from = fields.some((f) => route.fromProfile.includes(f));
  return from ? `${text}  [profile ${route.profile}]` : text;
}

function describeRoute(route: RoutePolicy, index: number, count: number): string[] {
  const methods = route.match.methods === null ? 'any method' : route.match.methods.join(', ');
  const head = `route ${index + 1}/${count} ${JSON.stringify(route.name)}`;
  const match: [string, string] = ['match', `${methods} ${route.match.path}`];
  if (route.mode === 'passthrough') return [head, ...table([match, ['mode', 'passthrough (forwarded untouched)']])];
  return [
    head,
    ...table([
      match,
      ['mode', route.mode === 'shadow' ? 'shadow (records and reports, never blocks)' : 'enforce'],
      ['profile', route.profile],
      ['deduplicates', byProfile(route, ['methods'], route.methods.join(', '))],
      ['key', byProfile(route, ['required'], keyText(route.key, route.required))],
      ['key scope', byProfile(route, ['keyScope'], route.keyScope === 'tenant' ? 'tenant' : 'tenant and request path')],
      ['tenant', tenantText(route.tenant)],
      ['fingerprint', byProfile(route, ['fingerprint.headers', 'fingerprint.query', 'fingerprint.json'], fingerprintText(route))],
      ['ttl', byProfile(route, ['ttl'], formatDuration(route.ttlMs))],
      ['lease', formatDuration(route.leaseMs)],
      ['in flight', route.onInFlight === 'wait' ? `wait up to ${formatDuration(route.waitMs)}, then 409` : '409 with Retry-After'],
      ['key reused', byProfile(route, ['mismatchStatus'], `${route.mismatchStatus} for a different payload`)],
      ['release on', byProfile(route, ['releaseOn'], route.releaseOn.length > 0 ? route.releaseOn.join(', ') : 'nothing')],
      ['errors', byProfile(route, ['errorFormat'], ERROR_FORMATS[route.errorFormat])],
      ['echo key', byProfile(route, ['echoKey'], route.echoKey ? 'Idempotency-Key on every answer to a keyed request' : 'no')],
      ['unknown outcome', route.onUnknownOutcome === 'store' ? 'store the 502/504 answer' : 'release the key'],
      ['expired lease', expiredLeaseText(route)],
      ['store error', route.onStoreError === 'fail' ? '503 (fail closed)' : 'forward without deduplication'],
      ['request body', `up to ${formatSize(route.maxBodyBytes)} (413 above)`],
      ['stored body', `up to ${formatSize(route.maxStoredResponseBytes)} (larger bodies are not retained)${route.record === 'reference' ? '; a 2xx answer with a Location on the upstream: a reference (replays GET it)' : ''}`],
      ['stored headers', storedHeadersText(route)],
    ]),
  ];
}

function expiredLeaseText(route: RoutePolicy): string {
  if (route.onExpiredLease === 'reexecute') return 're-execute';
  if (route.onExpiredLease === 'fail') return 'fail (409 until purged or expired)';
  const p = route.outcomeProbe!;
  return `probe: ${p.method} ${p.path} (2xx replayed, 404 re-executed, else 409)`;
}

/** A human-readable summary of `config`; safe to print (no secrets). */
export function describeConfig(config: Config): string {
  const { store, upstream } = config;
  const admin =
    config.admin === null ? 'disabled' : `${address(config.admin)} (admin token: ${config.adminToken === null ? 'none' : 'set, not shown'})`;
  const header = table([
    ['listen', `${address(config.listen)}${listenExtras(config)}`],
    ['clients', clientsText(config)],
    ['admin', admin],
    ['upstream', `${upstream.url} (timeout ${formatDuration(upstream.timeoutMs)}, ${upstream.connections} connections${upstream.keepAliveTimeoutMs === null ? '' : `, idle for at most ${formatDuration(upstream.keepAliveTimeoutMs)}`})`],
    ['store', store.postgres === null ? `embedded PGlite in ${store.dataDir} (single instance only)` : `PostgreSQL ${maskUrl(store.postgres)} (pool ${store.poolSize}, idle connections closed after ${formatDuration(store.idleTimeoutMs)}, timeout ${formatDuration(store.timeoutMs)}${store.preparedStatements ? '' : ', unnamed statements'})`],
    ['cache', store.redis === null ? 'none' : `Redis ${maskUrl(store.redis)}`],
    ['migrations', store.migrate ? 'applied by serve at start' : 'not applied by serve (run migrate)'],
    ['sweeper', `every ${formatDuration(store.sweepIntervalMs)}, ${store.sweepBatchSize} rows per batch`],
    ['log level', config.logLevel],
    ['shutdown', `in-flight requests get up to ${formatDuration(config.shutdownTimeoutMs)} to finish and commit`],
  ]);
  const routes = config.routes.flatMap((route, i) => ['', ...describeRoute(route, i, config.routes.length)]);
  return ['idempotency-proxy configuration', ...header, ...routes, '', 'requests matching no route are forwarded untouched', ''].join('\n');
}
