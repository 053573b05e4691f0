// Listener addresses ("host:port") and URLs (upstream origin, store URLs).
// Each parser returns the value or an error message; it never echoes a URL,
// because store URLs carry passwords.

import { isIP } from 'node:net';

export type Parsed<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: string };

const ok = <T>(value: T): Parsed<T> => ({ ok: true, value });
const fail = (error: string): Parsed<never> => ({ ok: false, error });

const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

export interface HostPort {
  readonly host: string;
  readonly port: number;
}

/**
 * `host:port`, `[ipv6]:port`, `:port` or `port` (the last two listen on
 * `defaultHost`). Port 0 asks the OS for a free port.
 */
export function parseHostPort(text: string, defaultHost: string): Parsed<HostPort> {
  const input = text.trim();
  const help = `must be "host:port" (e.g. ${defaultHost}:8080, [::1]:8080 or :8080)`;
  let host: string;
  let port: string;
  if (/^\d+$/.test(input)) {
    host = defaultHost;
    port = input;
  } else if (input.startsWith('[')) {
    const match = /^\[([^\]]+)\]:(\d+)$/.exec(input);
    if (match === null || isIP(match[1] as string) !== 6) return fail(`${help}; got ${JSON.stringify(text)}`);
    host = match[1] as string;
    port = match[2] as string;
  } else {
    const colon = input.lastIndexOf(':');
    if (colon < 0) return fail(`${help}; got ${JSON.stringify(text)} (no port)`);
    host = input.slice(0, colon) || defaultHost;
    port = input.slice(colon + 1);
    if (host.includes(':')) return fail(`${help}; write IPv6 addresses in brackets, e.g. [::1]:8080`);
    if (isIP(host) === 0 && !HOSTNAME.test(host)) return fail(`${help}; ${JSON.stringify(host)} is not a valid host`);
  }
  if (!/^\d{1,5}$/.test(port) || Number(port) > 65535) return fail(`port must be 0-65535; got ${JSON.stringify(port)}`);
  return ok({ host, port: Number(port) });
}

/**
 * The upstream is an origin: http(s)://host[:port] with no path (a lone "/"
 * is fine), query, fragment or credentials. Returns the normalised origin.
 */
export function parseUpstreamUrl(text: string): Parsed<string> {
  let url: URL;
  try {
    url = new URL(text.trim());
  } catch {
    return fail(`must be an absolute http:// or https:// URL such as http://127.0.0.1:3000; got ${JSON.stringify(text)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return fail(`must use http:// or https://; got ${url.protocol}//`);
  if (url.username !== '' || url.password !== '') return fail('must not contain credentials');
  if (url.pathname !== '/' && url.pathname !== '') {
    return fail(`must be an origin without a path (requests keep their own path); got path ${JSON.stringify(url.pathname)}`);
  }
  if (url.search !== '' || url.hash !== '') return fail('must not have a query or fragment');
  return ok(url.origin);
}

/** A store URL with one of `protocols` (e.g. `postgres:`). The URL is never echoed. */
export function checkStoreUrl(text: string, protocols: readonly string[]): Parsed<string> {
  const expected = protocols.map((p) => `${p}//`).join(' or ');
  let url: URL;
  try {
    url = new URL(text.trim());
  } catch {
    return fail(`must be a ${expected} URL (value not shown: it may contain a password)`);
  }
  if (!protocols.includes(url.protocol)) return fail(`must be a ${expected} URL; got ${url.protocol}//`);
  return ok(text.trim());
}
