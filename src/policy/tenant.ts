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

export function resolveTenant(source: TenantSource, headers: IncomingHttpHeaders): string {
  switch (source.kind) {
    case 'constant':
      return source.value;
    case 'fromHeader':
      return first(headers[source.header]) ?? '';
    case 'fromHeaderHash': {
      const v = first(headers[source.header]);
      return v === undefined || v === '' ? '' : hashTenant(v);
    }
  }
}

/** The stored tenant id for a tenant as a request would carry it (for the CLI). */
export function tenantIdFor(source: TenantSource, carried: string): string {
  switch (source.kind) {
    case 'constant':
      return source.value;
    case 'fromHeader':
      return carried;
    case 'fromHeaderHash':
      return carried === '' ? '' : hashTenant(carried);
  }
}
