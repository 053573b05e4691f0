import type { Config } from '../config/types.js';

// What a SIGHUP can change in a running proxy. Routes and their policies are
// compiled into a new Router and swapped in for new requests; the log level
// and the shutdown deadline are read when used. Listeners, the upstream pool
// and the store (PostgreSQL, Redis, sweeper) are built once: a change there
// needs a restart, and the running values are kept. The listener's TLS files
// and the upstream's (upstream.tls) are re-read on every reload
// (src/ops/tls-reload.ts): their paths may change live, turning TLS or mTLS
// on or off needs a restart.

const LIVE: ReadonlySet<string> = new Set(['routes', 'logLevel', 'shutdownTimeoutMs']);
/** Sections compared field by field, so the log names e.g. `upstream.timeout`. */
const SECTIONS: ReadonlySet<string> = new Set(['upstream', 'store', 'listenTimeouts']);

export interface ReloadPlan {
  /** The configuration to run with: the new live fields, the old everything else. */
  readonly config: Config;
  /** Settings that differ in the new file but need a restart, as YAML paths. */
  readonly restartNeeded: readonly string[];
  /** Live settings that changed. */
  readonly changed: readonly string[];
}

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

/** `timeoutMs` → `timeout`, `sweepIntervalMs` → `sweepInterval`: the YAML names. */
const yamlName = (field: string): string => YAML_NAMES[field] ?? field.replace(/Ms$/, '');
const YAML_NAMES: Readonly<Record<string, string>> = { listenTls: 'listen.tls', http2: 'listen.http2' };
/** Sections whose fields live under another YAML name: `listenTimeouts.sendTimeoutMs` → `listen.sendTimeout`. */
const SECTION_NAMES: Readonly<Record<string, string>> = { listenTimeouts: 'listen' };

/** New certificate paths are live; TLS or mTLS switched on or off is not. */
function tlsLive(current: Config, next: Config): boolean {
  const a = current.listenTls;
  const b = next.listenTls;
  return a !== null && b !== null && (a.clientCa === null) === (b.clientCa === null);
}

/** New upstream.tls paths (or servername) are live while upstream.tls stays set. */
function upstreamTlsLive(current: Config, next: Config): boolean {
  return current.upstream.tls !== null && next.upstream.tls !== null;
}

export function planReload(current: Config, next: Config): ReloadPlan {
  const restartNeeded: string[] = [];
  const changed: string[] = [];
  const fields = new Set([...Object.keys(current), ...Object.keys(next)]);
  for (const field of fields) {
    const a = (current as unknown as Record<string, unknown>)[field];
    const b = (next as unknown as Record<string, unknown>)[field];
    if (same(a, b)) continue;
    if (field === 'listenTls' && tlsLive(current, next)) continue;
    if (LIVE.has(field)) {
      changed.push(yamlName(field));
    } else if (SECTIONS.has(field) && a !== null && b !== null && typeof a === 'object' && typeof b === 'object') {
      const ra = a as Record<string, unknown>;
      const rb = b as Record<string, unknown>;
      for (const sub of new Set([...Object.keys(ra), ...Object.keys(rb)])) {
        if (field === 'upstream' && sub === 'tls' && upstreamTlsLive(current, next)) continue;
        if (!same(ra[sub], rb[sub])) restartNeeded.push(`${SECTION_NAMES[field] ?? field}.${yamlName(sub)}`);
      }
    } else {
      restartNeeded.push(yamlName(field));
    }
  }
  const config: Config = Object.freeze({
    ...current,
    routes: next.routes,
    logLevel: next.logLevel,
    shutdownTimeoutMs: next.shutdownTimeoutMs,
    listenTls: tlsLive(current, next) ? next.listenTls : current.listenTls,
    upstream: upstreamTlsLive(current, next) ? Object.freeze({ ...current.upstream, tls: next.upstream.tls }) : current.upstream,
  });
  return { config, restartNeeded, changed };
}
