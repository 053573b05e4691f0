// `listen` as "host:port" or { address, tls, http2 }, and `upstream.tls`
// (docs/configuration.md, Listener and Upstream). TLS files are read and
// checked here, so a missing or mismatched file is a configuration error that
// names its field.

import type { Issues, Path } from './issues.js';
import { isRecord } from './policy-layer.js';
import { readListenTls, readUpstreamTls, TlsFileError } from './tls-files.js';
import type { ListenTimeouts, ListenTls, RoutePolicy, UpstreamTls } from './types.js';

type Raw = Record<string, unknown>;

/**
 * The client listener's timeouts when the file sets none: 20 s for the headers and 2 min for the whole request (slow
 * loris), a keep-alive of 65 s (above a load balancer's usual 60 s idle timeout), a send timeout of 60 s (nginx's).
 */
export const LISTEN_TIMEOUT_DEFAULTS: ListenTimeouts = {
  headersTimeoutMs: 20_000, requestTimeoutMs: 120_000, keepAliveTimeoutMs: 65_000, sendTimeoutMs: 60_000,
};

const str = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);

function check(read: () => unknown, issues: Issues): void {
  try {
    read();
  } catch (err) {
    if (!(err instanceof TlsFileError)) throw err;
    issues.add(err.field.split('.'), err.message.slice(err.field.length + 2));
  }
}

/** The address text of `listen` (a string, or the mapping's `address`), if the file gives one. */
export function listenAddress(raw: Raw): { value: unknown; path: Path } {
  if (isRecord(raw.listen)) return { value: raw.listen.address, path: ['listen', 'address'] };
  return { value: raw.listen, path: ['listen'] };
}

export function resolveListenTls(raw: Raw, issues: Issues): ListenTls | null {
  if (!isRecord(raw.listen) || !isRecord(raw.listen.tls)) return null;
  const t = raw.listen.tls;
  const cert = str(t.cert);
  const key = str(t.key);
  if (cert === null || key === null) return null; // reported by the schema (required, minLength)
  const tls: ListenTls = { cert, key, clientCa: str(t.clientCa) };
  check(() => readListenTls(tls), issues);
  return tls;
}

export function resolveHttp2(raw: Raw): boolean {
  return isRecord(raw.listen) && raw.listen.http2 === true;
}

export function resolveUpstreamTls(section: Raw, url: string, issues: Issues): UpstreamTls | null {
  if (!isRecord(section.tls)) return null;
  const t = section.tls;
  const tls: UpstreamTls = { ca: str(t.ca), cert: str(t.cert), key: str(t.key), servername: str(t.servername) };
  if (url !== '' && !url.startsWith('https:')) issues.add(['upstream', 'tls'], `is only used with an https:// upstream.url (got ${url})`);
  if (tls.cert !== null && tls.key === null) issues.add(['upstream', 'tls', 'key'], 'is required with upstream.tls.cert (the client certificate\'s private key)');
  if (tls.key !== null && tls.cert === null) issues.add(['upstream', 'tls', 'cert'], 'is required with upstream.tls.key (the client certificate)');
  check(() => readUpstreamTls(tls), issues);
  return tls;
}

/** `tenant: { fromClientCert }` needs a listener that asks for and verifies client certificates. */
export function checkClientCertTenants(routes: readonly RoutePolicy[], tls: ListenTls | null, issues: Issues): void {
  if (tls?.clientCa != null) return;
  for (const [i, r] of routes.entries()) {
    if (r.tenant.kind !== 'fromClientCert') continue;
    issues.add(['routes', i, 'tenant', 'fromClientCert'],
      `route ${r.name} takes its tenant from the client certificate: set listen.tls.clientCa so the listener requires and verifies one`);
  }
}
