// Routes: each route's layer over the `defaults` layer over the built-in
// defaults (docs/contract.md, Configuration), merged field by field (fingerprint sub-field by
// sub-field), then checked across fields. No routes → one implicit route
// named "default" matching every path.

import type { KeySource, Profile, RoutePolicy } from './types.js';
import type { Issues, Path } from './issues.js';
import { formatPath } from './issues.js';
import { isRecord, MAX_BODY, readMethods, readPolicyLayer, type PolicyLayer } from './policy-layer.js';
import { formatDuration, formatSize } from './units.js';
import { ACP_MIN_TTL_MS, presetLayer } from './profiles.js';

type Resolved = Omit<RoutePolicy, 'name' | 'match' | 'key'>;

/** The heartbeat (src/lifecycle/heartbeat.ts) extends a running request's lease every third of it, but not more often than this. */
export const HEARTBEAT_FLOOR_MS = 50;
/** The shortest lease: at the heartbeat's floor, an extension still has as long again to land before the lease runs out. */
export const MIN_LEASE_MS = 2 * HEARTBEAT_FLOOR_MS;

/** The built-in key source: the Idempotency-Key header. */
export const BUILTIN_KEY: KeySource = { kind: 'header', header: 'idempotency-key' };

/** The built-in defaults, exactly as docs/contract.md (Configuration) shows them. */
export const BUILTIN_POLICY: Resolved = {
  methods: ['POST', 'PATCH'],
  required: false,
  ttlMs: 86_400_000,
  leaseMs: 90_000,
  maxBodyBytes: 1_048_576,
  maxStoredResponseBytes: 1_048_576,
  tenant: { kind: 'fromHeaderHash', header: 'authorization' },
  fingerprint: { headers: ['content-type'], query: true, json: 'raw', exclude: [] },
  releaseOn: [401, 403, 429],
  mode: 'enforce',
  mismatchStatus: 422,
  onInFlight: 'conflict',
  waitMs: 5_000,
  onUnknownOutcome: 'store',
  onExpiredLease: 'reexecute',
  outcomeProbe: null,
  onStoreError: 'fail',
  storeHeaders: [],
  dropHeaders: [],
  profile: 'ietf',
  errorFormat: 'problem',
  keyScope: 'tenant',
  echoKey: false,
  record: 'full',
  fromProfile: [],
};

/** Resolved field → the field's name in the YAML file. */
const YAML_NAME: Readonly<Record<string, string>> = { ttlMs: 'ttl', leaseMs: 'lease', waitMs: 'waitTimeout' };

const startsWith = (path: Path, prefix: Path): boolean => prefix.every((segment, i) => path[i] === segment);

/** Where a merged value came from: the route's field, the defaults' field, or null (built in). */
type Origin = Path | null;

class Merge {
  /** Most specific first: the route, its profile's preset, the defaults, their profile's preset. */
  constructor(
    private readonly layers: readonly PolicyLayer[],
    readonly routePath: Path,
  ) {}

  private readonly origins = new Map<string, Origin>();
  /** YAML names of the fields a profile's preset gave. */
  readonly fromProfile: string[] = [];

  private found(field: string, layer: PolicyLayer, yamlPath: Path): void {
    // A preset's value is blamed on the `profile` field that named it.
    this.origins.set(field, layer.preset === undefined ? yamlPath : layer.path);
    if (layer.preset !== undefined) this.fromProfile.push(yamlPath.slice(layer.path.length).join('.'));
  }

  take<K extends keyof Resolved & keyof PolicyLayer>(field: K): NonNullable<Resolved[K]> {
    for (const layer of this.layers) {
      const value = layer[field];
      if (value !== undefined) {
        this.found(field, layer, [...layer.path, YAML_NAME[field] ?? field]);
        return value as unknown as NonNullable<Resolved[K]>;
      }
    }
    this.origins.set(field, null);
    return BUILTIN_POLICY[field] as NonNullable<Resolved[K]>;
  }

  takeFingerprint<K extends keyof Resolved['fingerprint']>(field: K): Resolved['fingerprint'][K] {
    for (const layer of this.layers) {
      const value = layer.fingerprint[field];
      if (value !== undefined) {
        this.found(`fingerprint.${field}`, layer, [...layer.path, 'fingerprint', field]);
        return value as Resolved['fingerprint'][K];
      }
    }
    this.origins.set(`fingerprint.${field}`, null);
    return BUILTIN_POLICY.fingerprint[field];
  }

  /** The most specific place a field was set (route, then defaults), else the route itself. */
  blame(...fields: string[]): Path {
    const origins = fields.map((f) => this.origins.get(f) ?? null);
    const inRoute = origins.find((o) => o !== null && startsWith(o, this.routePath));
    return inRoute ?? origins.find((o) => o !== null) ?? this.routePath;
  }

  setInRoute(field: string): boolean {
    const origin = this.origins.get(field) ?? null;
    return origin !== null && startsWith(origin, this.routePath);
  }

  isSet(field: string): boolean {
    return (this.origins.get(field) ?? null) !== null;
  }
}

/** A layer's own key choice: `key` wins over `keyHeader` set at the same or a less specific level. */
function keyOf(layer: PolicyLayer): KeySource | undefined {
  if (layer.key !== undefined) return layer.key;
  if (layer.keyHeader !== undefined) return { kind: 'header', header: layer.keyHeader };
  return undefined;
}

function crossCheck(m: Merge, p: Resolved, match: RoutePolicy['match'], issues: Issues): void {
  if (p.leaseMs > 0 && p.leaseMs < MIN_LEASE_MS) { // 0 is refused on its own
    issues.add(m.blame('leaseMs'), `lease (${formatDuration(p.leaseMs)}) must be at least ${formatDuration(MIN_LEASE_MS)}: a running request's lease is extended every third of it but at most every ${formatDuration(HEARTBEAT_FLOOR_MS)}, so a shorter one runs out while its request runs, and a retry could run the operation again`);
  }
  if (p.leaseMs > p.ttlMs) {
    const at = m.blame('leaseMs', 'ttlMs');
    const leaseBlamed = at[at.length - 1] === 'lease';
    issues.add(at, leaseBlamed
      ? `lease (${formatDuration(p.leaseMs)}) must not be longer than ttl (${formatDuration(p.ttlMs)})`
      : `ttl (${formatDuration(p.ttlMs)}) must not be shorter than lease (${formatDuration(p.leaseMs)})`);
  }
  if (m.isSet('waitMs') && p.waitMs > p.leaseMs) {
    issues.add(m.blame('waitMs', 'leaseMs'), `waitTimeout (${formatDuration(p.waitMs)}) must not be longer than lease (${formatDuration(p.leaseMs)})`);
  }
  if (p.fingerprint.exclude.length > 0 && p.fingerprint.json !== 'canonical') {
    issues.add(m.blame('fingerprint.exclude', 'fingerprint.json'), 'fingerprint.exclude needs fingerprint.json: canonical (raw bodies are hashed byte for byte)');
  }
  for (const header of p.storeHeaders) {
    if (p.dropHeaders.includes(header)) issues.add(m.blame('dropHeaders', 'storeHeaders'), `${header} is in both storeHeaders and dropHeaders`);
  }
  probeCheck(m, p, issues);
  if (p.mode !== 'passthrough' && match.methods !== null && !match.methods.some((x) => p.methods.includes(x))) {
    const at = m.setInRoute('methods') ? m.blame('methods') : [...m.routePath, 'match', 'methods'];
    issues.add(at, `none of match.methods (${match.methods.join(', ')}) is in methods (${p.methods.join(', ')}), so this route never deduplicates: set methods, or mode: passthrough`);
  }
}

/**
 * A keyed route buffers each request body whole, inside limits.maxBufferedBytes: a body larger than the whole
 * budget could never be admitted, and its client would be told `503 overloaded`, retryable, for ever.
 */
function budgetCheck(m: Merge, p: Resolved, bufferedBytes: number, issues: Issues): void {
  // Over 1GiB it is refused on its own (policy-layer.ts).
  if (p.mode === 'passthrough' || p.maxBodyBytes <= bufferedBytes || p.maxBodyBytes > MAX_BODY) return;
  const at = m.isSet('maxBodyBytes') ? m.blame('maxBodyBytes') : ['limits', 'maxBufferedBytes'];
  issues.add(at, `maxBodyBytes (${formatSize(p.maxBodyBytes)}) must not be larger than limits.maxBufferedBytes (${formatSize(bufferedBytes)}), ` +
    'the memory all buffered request bodies share: a body that large could never be admitted (503 overloaded, for ever); lower maxBodyBytes or raise limits.maxBufferedBytes');
}

/**
 * onExpiredLease: probe needs the probe; a route's own outcomeProbe without
 * probe would never be sent, which is a mistake worth stopping for (an
 * outcomeProbe in defaults is checked once every route is resolved).
 */
function probeCheck(m: Merge, p: Resolved, issues: Issues): void {
  if (p.onExpiredLease === 'probe' && p.outcomeProbe === null) {
    issues.add(m.blame('onExpiredLease'), 'onExpiredLease: probe needs outcomeProbe: { method, path }, the request that asks the upstream whether the operation ran (e.g. { method: GET, path: "/v1/orders/by-idempotency-key/{key}" })');
  }
  if (p.onExpiredLease !== 'probe' && m.setInRoute('outcomeProbe')) {
    issues.add(m.blame('outcomeProbe'), `outcomeProbe is never sent: onExpiredLease is ${p.onExpiredLease}; set onExpiredLease: probe, or remove outcomeProbe`);
  }
}

/** The layers a route's fields are taken from, most specific first (src/config/profiles.ts). */
function layersOf(route: PolicyLayer, defaults: PolicyLayer): PolicyLayer[] {
  if (route.profile !== undefined) return [route, presetLayer(route.profile, [...route.path, 'profile']), defaults];
  if (defaults.profile !== undefined) return [route, defaults, presetLayer(defaults.profile, [...defaults.path, 'profile'])];
  return [route, defaults];
}

function profileCheck(m: Merge, p: Resolved, profile: Profile, issues: Issues): void {
  if (profile === 'acp' && p.ttlMs < ACP_MIN_TTL_MS) {
    issues.add(m.blame('ttlMs'), `ttl (${formatDuration(p.ttlMs)}) must be at least 24h under profile: acp (ACP §6.6: keys are retained at least 24 hours)`);
  }
}

function resolvePolicy(route: PolicyLayer, defaults: PolicyLayer, name: string, match: RoutePolicy['match'], issues: Issues, bufferedBytes: number): RoutePolicy {
  const m = new Merge(layersOf(route, defaults), route.path);
  const profile = route.profile ?? defaults.profile ?? BUILTIN_POLICY.profile;
  const leaseMs = m.take('leaseMs');
  const waitSet = route.waitMs !== undefined || defaults.waitMs !== undefined;
  const policy: Resolved = {
    methods: m.take('methods'),
    required: m.take('required'),
    ttlMs: m.take('ttlMs'),
    leaseMs,
    maxBodyBytes: m.take('maxBodyBytes'),
    maxStoredResponseBytes: m.take('maxStoredResponseBytes'),
    tenant: m.take('tenant'),
    fingerprint: {
      headers: m.takeFingerprint('headers'),
      query: m.takeFingerprint('query'),
      json: m.takeFingerprint('json'),
      exclude: m.takeFingerprint('exclude'),
    },
    releaseOn: m.take('releaseOn'),
    mode: m.take('mode'),
    mismatchStatus: m.take('mismatchStatus'),
    onInFlight: m.take('onInFlight'),
    // Unset, the wait bound is 5s or the lease, whichever is shorter.
    waitMs: waitSet ? m.take('waitMs') : Math.min(BUILTIN_POLICY.waitMs, leaseMs),
    onUnknownOutcome: m.take('onUnknownOutcome'),
    onExpiredLease: m.take('onExpiredLease'),
    outcomeProbe: m.take('outcomeProbe') as Resolved['outcomeProbe'],
    onStoreError: m.take('onStoreError'),
    storeHeaders: m.take('storeHeaders'),
    dropHeaders: m.take('dropHeaders'),
    profile,
    errorFormat: m.take('errorFormat'),
    keyScope: m.take('keyScope'),
    echoKey: m.take('echoKey'),
    record: m.take('record'),
    fromProfile: m.fromProfile,
  };
  crossCheck(m, policy, match, issues);
  budgetCheck(m, policy, bufferedBytes, issues);
  profileCheck(m, policy, profile, issues);
  return { name, match, key: keyOf(route) ?? keyOf(defaults) ?? BUILTIN_KEY, ...policy };
}

function readMatch(raw: unknown, path: Path, issues: Issues): RoutePolicy['match'] {
  const match = isRecord(raw) ? raw : {};
  const routePath = typeof match.path === 'string' ? match.path : '/**';
  if (typeof match.path === 'string' && (!routePath.startsWith('/') || /\s/.test(routePath))) {
    issues.add([...path, 'path'], `must be a path pattern starting with "/" (e.g. /v1/payments/**); got ${JSON.stringify(routePath)}`);
  }
  const methods = match.methods === undefined ? null : (readMethods(match.methods, [...path, 'methods'], issues) ?? null);
  return { methods, path: routePath };
}

/**
 * The resolved routes, in file order. `bufferedBytes`: limits.maxBufferedBytes, the memory every buffered request
 * body shares (src/lifecycle/budget.ts).
 */
export function resolveRoutes(rawDefaults: unknown, rawRoutes: unknown, issues: Issues, bufferedBytes: number): RoutePolicy[] {
  const defaults = readPolicyLayer(rawDefaults, ['defaults'], issues);
  const list = Array.isArray(rawRoutes) ? rawRoutes : [];
  if (list.length === 0) {
    const implicit: PolicyLayer = { path: ['defaults'], fingerprint: {} };
    return [resolvePolicy(implicit, defaults, 'default', { methods: null, path: '/**' }, issues, bufferedBytes)];
  }
  const seen = new Map<string, number>();
  const routes: RoutePolicy[] = [];
  let catchAll: number | null = null;
  list.forEach((raw: unknown, index) => {
    const path: Path = ['routes', index];
    const r = isRecord(raw) ? raw : {};
    const name = typeof r.name === 'string' ? r.name : `#${index}`;
    if (typeof r.name === 'string') {
      const first = seen.get(name);
      if (first !== undefined) issues.add([...path, 'name'], `duplicate route name ${JSON.stringify(name)} (also ${formatPath(['routes', first])})`);
      else seen.set(name, index);
    }
    const match = readMatch(r.match, [...path, 'match'], issues);
    if (catchAll !== null) {
      issues.add(path, `is never used: ${formatPath(['routes', catchAll])} already matches every request (path /** with no methods)`);
    }
    if (catchAll === null && isRecord(r.match) && r.match.path === '/**' && match.methods === null) catchAll = index;
    routes.push(resolvePolicy(readPolicyLayer(raw, path, issues), defaults, name, match, issues, bufferedBytes));
  });
  if (defaults.outcomeProbe !== undefined && !routes.some((r) => r.onExpiredLease === 'probe')) {
    issues.add(['defaults', 'outcomeProbe'], 'outcomeProbe is never sent: no route has onExpiredLease: probe; set it, or remove outcomeProbe');
  }
  return routes;
}
