import picomatch from 'picomatch';
import type { Config, ReleaseOn, RoutePolicy } from '../config/types.js';
import { compileFingerprint, type CompiledFingerprint } from './fingerprint.js';
import { parsePointer } from './json.js';
import { compileStoredHeaders } from '../proxy/headers.js';
import { dialectFor, type Dialect } from '../http/dialects.js';
import { compileProbe, type CompiledProbe } from '../proxy/probe.js';

// Routes compiled once at startup; the hot path pays a regex test per route
// until the first match and nothing for features a route does not use.

export interface CompiledRoute {
  readonly name: string;
  readonly policy: RoutePolicy;
  /** false for mode: passthrough. */
  readonly idempotent: boolean;
  /** enforce answers duplicates; shadow forwards them and counts what it would have done. */
  readonly shadow: boolean;
  /** The body key's JSON Pointer, already split into its tokens (null: the key is in a header). */
  readonly keyPointer: readonly string[] | null;
  /** releaseOn: an upstream status that is not bound to the key. */
  readonly releases: (status: number) => boolean;
  readonly idemMethods: ReadonlySet<string>;
  readonly fingerprint: CompiledFingerprint;
  /** The body is parsed as JSON (key from body, canonical fingerprint). */
  readonly needsJson: boolean;
  /** Stored response headers (lower-case name → kept). */
  readonly storeHeader: (name: string) => boolean;
  /** The shape and headers of the proxy's own answers on this route (errorFormat, docs/profiles.md). */
  readonly dialect: Dialect;
  /** keyScope: tenantAndPath — the request path is part of the key's scope. */
  readonly scopePath: boolean;
  /** onExpiredLease: probe — the outcome probe's request (null: the route does not probe). */
  readonly probe: CompiledProbe | null;
  /** record: reference — a 2xx answer with a same-origin Location is stored as a reference (src/proxy/reference.ts). */
  readonly reference: boolean;
}

interface Entry {
  readonly methods: ReadonlySet<string> | null;
  readonly path: RegExp;
  readonly route: CompiledRoute;
}

export class Router {
  private readonly entries: readonly Entry[];
  readonly routes: readonly CompiledRoute[];

  constructor(config: Config) {
    const entries: Entry[] = [];
    for (const policy of config.routes) {
      const route: CompiledRoute = {
        name: policy.name,
        policy,
        idempotent: policy.mode !== 'passthrough',
        shadow: policy.mode === 'shadow',
        keyPointer: policy.key.kind === 'fromBody' ? parsePointer(policy.key.pointer) : null,
        releases: compileReleaseOn(policy.releaseOn),
        idemMethods: new Set(policy.methods),
        fingerprint: compileFingerprint(policy.fingerprint),
        needsJson: policy.key.kind === 'fromBody' || policy.fingerprint.json === 'canonical',
        storeHeader: compileStoredHeaders(policy.storeHeaders, policy.dropHeaders),
        dialect: dialectFor(policy.errorFormat),
        scopePath: policy.keyScope === 'tenantAndPath',
        probe: compileProbe(policy),
        reference: policy.record === 'reference',
      };
      entries.push({
        methods: policy.match.methods === null ? null : new Set(policy.match.methods),
        path: picomatch.makeRe(policy.match.path, { dot: true }),
        route,
      });
    }
    this.entries = entries;
    this.routes = entries.map((e) => e.route);
  }

  /** First matching route in YAML order, or null (pass-through). */
  match(method: string, path: string): CompiledRoute | null {
    for (const e of this.entries) {
      if (e.methods !== null && !e.methods.has(method)) continue;
      if (e.path.test(path)) return e.route;
    }
    return null;
  }
}

/** releaseOn as a lookup: one array read per response; a class (`5xx`) fills its hundred entries. */
function compileReleaseOn(entries: readonly ReleaseOn[]): (status: number) => boolean {
  const table = new Uint8Array(1000);
  for (const e of entries) {
    if (typeof e === 'number') {
      if (e >= 0 && e < 1000) table[e] = 1;
    } else {
      const base = Number(e[0]) * 100;
      table.fill(1, base, base + 100);
    }
  }
  return (status) => table[status] === 1;
}
