import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { TenantSource } from '../config/types.js';

// Keys are unique per (tenant, key). Raw credentials are never stored: a
// hashed tenant is the SHA-256 of the header value, hex.

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

export function resolveTenant(source: TenantSource, headers: IncomingHttpHeaders): string {
  switch (source.kind) {
    case 'constant':
      return source.value;
    case 'fromHeader':
      return bounded(first(headers[source.header]) ?? '');
    case 'fromHeaderHash': {
      const v = first(headers[source.header]);
      return v === undefined || v === '' ? '' : hashTenant(v);
    }
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
      return bounded(carried);
    case 'fromHeaderHash':
      return carried === '' ? '' : hashTenant(carried);
  }
}
