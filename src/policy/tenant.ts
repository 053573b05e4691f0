import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';
import type { TenantSource } from '../config/types.js';

// Keys are unique per (tenant, key). Raw credentials are never stored: a
// hashed tenant is the SHA-256 of the header value, hex. A tenant from the
// client certificate is its subject (docs/configuration.md, tenant).

export function hashTenant(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}

function first(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/**
 * A tenant header value longer than this is stored as `sha256:<hex>`: the
 * tenant is part of the primary key, and one B-tree entry holds ~2.7 kB —
 * a longer value would fail the claim of every request batched with it.
 */
export const MAX_TENANT_CHARS = 256;

function bounded(value: string): string {
  return value.length <= MAX_TENANT_CHARS ? value : `sha256:${hashTenant(value)}`;
}

/**
 * The subject of an X.509 certificate in RFC 4514 form (most specific RDN
 * first, e.g. `CN=client-a,O=Acme,C=DE`), from Node's one-attribute-per-line
 * rendering (issuer order, RFC 2253 escaping).
 */
export function subjectRfc4514(multiline: string): string {
  return multiline.split('\n').filter((l) => l !== '').reverse().join(',');
}

/** One subject per TLS connection (every request and HTTP/2 stream on it shares it). */
const subjects = new WeakMap<object, string>();

function clientCertSubject(req: IncomingMessage): string {
  const socket = req.socket as Partial<TLSSocket>;
  const known = subjects.get(socket);
  if (known !== undefined) return known;
  // The listener verified the certificate (listen.tls.clientCa): a request without one never gets here.
  const cert = socket.getPeerX509Certificate?.();
  const subject = cert === undefined ? '' : bounded(subjectRfc4514(cert.subject));
  subjects.set(socket, subject);
  return subject;
}

export function resolveTenant(source: TenantSource, req: IncomingMessage): string {
  switch (source.kind) {
    case 'constant':
      return source.value;
    case 'fromHeader':
      return bounded(first(req.headers[source.header]) ?? '');
    case 'fromHeaderHash': {
      const v = first(req.headers[source.header]);
      return v === undefined || v === '' ? '' : hashTenant(v);
    }
    case 'fromClientCert':
      return clientCertSubject(req);
  }
}

/**
 * keyScope: tenantAndPath — the tenant id with the request path, so the same
 * key on another path is another key (a space cannot occur in a request path).
 */
export function tenantWithPath(tenantId: string, path: string): string {
  return bounded(`${tenantId} ${path}`);
}

/** The stored tenant id for a tenant as a request would carry it (for the CLI). */
export function tenantIdFor(source: TenantSource, carried: string): string {
  switch (source.kind) {
    case 'constant':
      return source.value;
    case 'fromHeader':
    case 'fromClientCert': // the subject in RFC 4514 form, e.g. CN=client-a,O=Acme
      return bounded(carried);
    case 'fromHeaderHash':
      return carried === '' ? '' : hashTenant(carried);
  }
}
