// One layer of per-route policy (the `defaults` block or one route), read
// from the validated tree with units converted and names normalised. Fields
// the layer does not set stay undefined so layers can be merged. Checks that
// concern a single field are made here; checks across fields after merging.

import { METHODS } from 'node:http';
import type { ErrorFormat, KeyScope, KeySource, Mode, Profile, RecordMode, ReleaseOn, StatusClass, OnExpiredLease, OnInFlight, OnStoreError, OnUnknownOutcome, OutcomeProbe, TenantSource } from './types.js';
import type { Issues, Path } from './issues.js';
import { parseDuration, parseSize, timedDurationIssue } from './units.js';

export interface PolicyLayer {
  readonly path: Path;
  keyHeader?: string;
  key?: KeySource;
  methods?: string[];
  required?: boolean;
  ttlMs?: number;
  leaseMs?: number;
  maxBodyBytes?: number;
  maxStoredResponseBytes?: number;
  tenant?: TenantSource;
  fingerprint: { headers?: string[]; query?: boolean; json?: 'raw' | 'canonical'; exclude?: string[] };
  releaseOn?: ReleaseOn[];
  mode?: Mode;
  mismatchStatus?: 400 | 422;
  onInFlight?: OnInFlight;
  waitMs?: number;
  onUnknownOutcome?: OnUnknownOutcome;
  onExpiredLease?: OnExpiredLease;
  outcomeProbe?: OutcomeProbe;
  onStoreError?: OnStoreError;
  storeHeaders?: string[];
  dropHeaders?: string[];
  // --- protocol profiles (docs/profiles.md) ---
  profile?: Profile;
  errorFormat?: ErrorFormat;
  keyScope?: KeyScope;
  echoKey?: boolean;
  record?: RecordMode;
  /** Set on a profile's preset layer: the profile it is. */
  preset?: Profile;
}

const KNOWN_METHODS: ReadonlySet<string> = new Set(METHODS);
export const MAX_BODY = 1_073_741_824; // 1GiB: bodies are buffered, and PostgreSQL bytea stops at 1GB
const JSON_POINTER = /^(\/([^~/]|~[01])*)*$/;
const FRAMING_OR_HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection', 'keep-alive', 'transfer-encoding', 'content-length', 'te', 'trailer', 'upgrade',
]);
const CREDENTIAL_HEADERS: ReadonlySet<string> = new Set(['authorization', 'proxy-authorization', 'cookie']);

type Raw = Record<string, unknown>;

export const isRecord = (value: unknown): value is Raw =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

const stringsOf = (value: unknown): string[] | undefined =>
  Array.isArray(value) && value.every((v) => typeof v === 'string') ? (value as string[]) : undefined;

const unique = <T>(values: readonly T[]): T[] => [...new Set(values)];

function oneOf<T extends string | number>(value: unknown, allowed: readonly T[]): T | undefined {
  return allowed.includes(value as T) ? (value as T) : undefined;
}

function unit(raw: Raw, field: string, base: Path, issues: Issues, parse: (v: string | number) => number): number | undefined {
  const value = raw[field];
  if (typeof value !== 'string' && typeof value !== 'number') return undefined;
  try {
    return parse(value);
  } catch (error) {
    issues.add([...base, field], (error as Error).message);
    return undefined;
  }
}

/** Upper-cased, de-duplicated methods; unknown ones are reported. */
export function readMethods(value: unknown, path: Path, issues: Issues): string[] | undefined {
  const list = stringsOf(value);
  if (list === undefined) return undefined;
  const methods = unique(list.map((m) => m.toUpperCase()));
  methods.forEach((m, i) => {
    if (!KNOWN_METHODS.has(m)) issues.add([...path, i], `unknown HTTP method ${JSON.stringify(m)}`);
  });
  return methods;
}

function headers(value: unknown): string[] | undefined {
  const list = stringsOf(value);
  return list === undefined ? undefined : unique(list.map((h) => h.toLowerCase()));
}

function checkPointer(pointer: string, path: Path, issues: Issues, what: string): void {
  if (pointer === '') issues.add(path, `${what} must point into the body, not at the whole document ("")`);
  else if (!JSON_POINTER.test(pointer)) {
    issues.add(path, `must be a JSON Pointer (RFC 6901) such as /id or /data/object/id; got ${JSON.stringify(pointer)}`);
  }
}

function readKey(raw: Raw, base: Path, issues: Issues): KeySource | undefined {
  const key = raw.key;
  if (!isRecord(key)) return undefined;
  if (typeof key.fromHeader === 'string') return { kind: 'fromHeader', header: key.fromHeader.toLowerCase() };
  if (typeof key.fromBody === 'string') {
    checkPointer(key.fromBody, [...base, 'key', 'fromBody'], issues, 'the key');
    return { kind: 'fromBody', pointer: key.fromBody };
  }
  return undefined;
}

function readTenant(raw: Raw, base: Path, issues: Issues): TenantSource | undefined {
  const tenant = raw.tenant;
  if (!isRecord(tenant)) return undefined;
  if (typeof tenant.fromHeader === 'string') {
    const header = tenant.fromHeader.toLowerCase();
    if (CREDENTIAL_HEADERS.has(header)) {
      issues.add([...base, 'tenant', 'fromHeader'], `${header} carries credentials, which are never stored: use { fromHeaderHash: ${header} }`);
    }
    return { kind: 'fromHeader', header };
  }
  if (typeof tenant.fromHeaderHash === 'string') return { kind: 'fromHeaderHash', header: tenant.fromHeaderHash.toLowerCase() };
  if (typeof tenant.constant === 'string') return { kind: 'constant', value: tenant.constant };
  if (tenant.fromClientCert === 'subject') return { kind: 'fromClientCert', field: 'subject' };
  return undefined;
}

function readFingerprint(raw: Raw, base: Path, issues: Issues): PolicyLayer['fingerprint'] {
  const fp = raw.fingerprint;
  if (!isRecord(fp)) return {};
  const exclude = stringsOf(fp.exclude);
  exclude?.forEach((pointer, i) => checkPointer(pointer, [...base, 'fingerprint', 'exclude', i], issues, 'an excluded field'));
  return {
    headers: headers(fp.headers),
    query: typeof fp.query === 'boolean' ? fp.query : undefined,
    json: oneOf(fp.json, ['raw', 'canonical'] as const),
    exclude: exclude === undefined ? undefined : unique(exclude),
  };
}

function readStoreHeaders(raw: Raw, base: Path, issues: Issues): string[] | undefined {
  const list = headers(raw.storeHeaders);
  list?.forEach((header) => {
    if (FRAMING_OR_HOP_BY_HOP.has(header) || header.startsWith('proxy-')) {
      issues.add([...base, 'storeHeaders'], `${header} is a hop-by-hop or framing header and is never stored`);
    }
  });
  return list;
}

function readSize(raw: Raw, field: string, base: Path, issues: Issues): number | undefined {
  const bytes = unit(raw, field, base, issues, parseSize);
  if (bytes !== undefined && bytes > MAX_BODY) issues.add([...base, field], 'must be at most 1GiB');
  return bytes;
}

function readPositiveDuration(raw: Raw, field: string, base: Path, issues: Issues): number | undefined {
  const ms = unit(raw, field, base, issues, parseDuration);
  if (ms === 0) issues.add([...base, field], 'must be longer than 0');
  return ms;
}

/** A duration the proxy counts down itself (lease, waitTimeout): at most 24d (units.ts, MAX_TIMED_MS). */
function readTimedDuration(raw: Raw, field: string, base: Path, issues: Issues, zeroAllowed: boolean): number | undefined {
  const ms = unit(raw, field, base, issues, parseDuration);
  if (ms === undefined || (ms === 0 && zeroAllowed)) return ms;
  const issue = timedDurationIssue(ms);
  if (issue !== null) issues.add([...base, field], issue);
  return ms;
}

/** Statuses as numbers, classes lower-cased (`5XX` → `5xx`); the schema has checked each entry. */
function readReleaseOn(value: unknown): ReleaseOn[] | undefined {
  if (!Array.isArray(value)) return undefined;
  const out: ReleaseOn[] = [];
  for (const v of value) {
    if (Number.isInteger(v)) out.push(v as number);
    else if (typeof v === 'string' && /^[1-5][0-9]{2}$/.test(v)) out.push(Number(v));
    else if (typeof v === 'string' && /^[1-5]xx$/i.test(v)) out.push(v.toLowerCase() as StatusClass);
    else return undefined;
  }
  return unique(out);
}

const PROBE_METHODS: readonly string[] = ['GET', 'HEAD'];

/**
 * outcomeProbe: { method, path }. The probe only asks: GET or HEAD. The path
 * is origin-form (it may carry a query) and names the key as `{key}`, the one
 * placeholder there is.
 */
function readOutcomeProbe(raw: Raw, base: Path, issues: Issues): OutcomeProbe | undefined {
  const probe = raw.outcomeProbe;
  if (!isRecord(probe) || typeof probe.method !== 'string' || typeof probe.path !== 'string') return undefined;
  const at = [...base, 'outcomeProbe'];
  const method = probe.method.toUpperCase();
  if (!PROBE_METHODS.includes(method)) {
    issues.add([...at, 'method'], `must be GET or HEAD (the probe asks whether the operation ran; it must change nothing); got ${JSON.stringify(probe.method)}`);
  }
  const path = probe.path;
  if (!path.startsWith('/') || /[\s#]/.test(path)) {
    issues.add([...at, 'path'], `must be a path starting with "/", without spaces or a fragment (e.g. /v1/orders/by-idempotency-key/{key}); got ${JSON.stringify(path)}`);
  } else if (/[{}]/.test(path.replaceAll('{key}', ''))) {
    issues.add([...at, 'path'], `{key} is the only placeholder (the URL-encoded key); got ${JSON.stringify(path)}`);
  }
  return { method: method as OutcomeProbe['method'], path };
}

/** Reads one policy layer; `raw` may still contain values the schema rejected. */
export function readPolicyLayer(raw: unknown, base: Path, issues: Issues): PolicyLayer {
  const r: Raw = isRecord(raw) ? raw : {};
  if (r.key !== undefined && r.keyHeader !== undefined) {
    issues.add([...base, 'key'], 'set either key or keyHeader, not both');
  }
  return {
    path: base,
    keyHeader: typeof r.keyHeader === 'string' ? r.keyHeader.toLowerCase() : undefined,
    key: readKey(r, base, issues),
    methods: readMethods(r.methods, [...base, 'methods'], issues),
    required: typeof r.required === 'boolean' ? r.required : undefined,
    ttlMs: readPositiveDuration(r, 'ttl', base, issues),
    leaseMs: readTimedDuration(r, 'lease', base, issues, false),
    maxBodyBytes: readSize(r, 'maxBodyBytes', base, issues),
    maxStoredResponseBytes: readSize(r, 'maxStoredResponseBytes', base, issues),
    tenant: readTenant(r, base, issues),
    fingerprint: readFingerprint(r, base, issues),
    releaseOn: readReleaseOn(r.releaseOn),
    mode: oneOf(r.mode, ['enforce', 'shadow', 'passthrough'] as const),
    mismatchStatus: oneOf(r.mismatchStatus, [400, 422] as const),
    onInFlight: oneOf(r.onInFlight, ['conflict', 'wait'] as const),
    waitMs: readTimedDuration(r, 'waitTimeout', base, issues, true),
    onUnknownOutcome: oneOf(r.onUnknownOutcome, ['store', 'release'] as const),
    onExpiredLease: oneOf(r.onExpiredLease, ['reexecute', 'fail', 'probe'] as const),
    outcomeProbe: readOutcomeProbe(r, base, issues),
    onStoreError: oneOf(r.onStoreError, ['fail', 'passthrough'] as const),
    storeHeaders: readStoreHeaders(r, base, issues),
    dropHeaders: headers(r.dropHeaders),
    profile: oneOf(r.profile, ['ietf', 'stripe', 'acp'] as const),
    errorFormat: oneOf(r.errorFormat, ['problem', 'stripe', 'acp'] as const),
    keyScope: oneOf(r.keyScope, ['tenant', 'tenantAndPath'] as const),
    echoKey: typeof r.echoKey === 'boolean' ? r.echoKey : undefined,
    record: oneOf(r.record, ['full', 'reference'] as const),
  };
}
