// The resolved, validated and frozen configuration. Everything downstream of
// src/config/ reads only these types: durations are milliseconds, sizes are
// bytes, header names are lower-case, defaults are already applied.

export type Mode = 'enforce' | 'shadow' | 'passthrough';
export type OnInFlight = 'conflict' | 'wait';
export type OnUnknownOutcome = 'store' | 'release';
export type OnExpiredLease = 'reexecute' | 'fail' | 'probe';
/** outcomeProbe: the request that asks the upstream whether an operation ran (onExpiredLease: probe). */
export interface OutcomeProbe {
  readonly method: 'GET' | 'HEAD';
  /** Starts with "/"; `{key}` stands for the URL-encoded key. */
  readonly path: string;
}
export type OnStoreError = 'fail' | 'passthrough';
/** A releaseOn entry: one status, or a class of them (`5xx`: 500–599). */
export type StatusClass = '1xx' | '2xx' | '3xx' | '4xx' | '5xx';
export type ReleaseOn = number | StatusClass;

// --- protocol profiles (docs/profiles.md) ---
/** A preset of the fields below and of the others a client of that protocol expects. */
export type Profile = 'ietf' | 'stripe' | 'acp';
/** The shape of the proxy's own error answers: RFC 9457 problem+json, Stripe's envelope, ACP's flat object. */
export type ErrorFormat = 'problem' | 'stripe' | 'acp';
/** What a key is unique within: the tenant, or the tenant and the request path. */
export type KeyScope = 'tenant' | 'tenantAndPath';
/** What a 2xx answer with a same-origin Location is stored as (docs/storage.md, Record kinds). */
export type RecordMode = 'full' | 'reference';

export type KeySource =
  | { readonly kind: 'header'; readonly header: string } // the default: keyHeader
  | { readonly kind: 'fromHeader'; readonly header: string } // e.g. ce-id, webhook-id
  | { readonly kind: 'fromBody'; readonly pointer: string }; // JSON Pointer, e.g. /id

export type TenantSource =
  | { readonly kind: 'fromHeader'; readonly header: string }
  | { readonly kind: 'fromHeaderHash'; readonly header: string }
  | { readonly kind: 'constant'; readonly value: string }
  | { readonly kind: 'fromClientCert'; readonly field: 'subject' }; // mTLS: docs/configuration.md

export interface FingerprintPolicy {
  readonly headers: readonly string[]; // lower-case header names
  readonly query: boolean;
  readonly json: 'raw' | 'canonical';
  readonly exclude: readonly string[]; // JSON Pointers, only with json: canonical
}

export interface RoutePolicy {
  readonly name: string;
  readonly match: {
    readonly methods: readonly string[] | null; // null = any method
    readonly path: string; // glob, e.g. /v1/payments/**
  };
  readonly key: KeySource;
  readonly methods: readonly string[]; // upper-case; requests with these go through idempotency
  readonly required: boolean;
  readonly ttlMs: number;
  readonly leaseMs: number;
  readonly maxBodyBytes: number;
  readonly maxStoredResponseBytes: number;
  readonly tenant: TenantSource;
  readonly fingerprint: FingerprintPolicy;
  readonly releaseOn: readonly ReleaseOn[];
  readonly mode: Mode;
  readonly mismatchStatus: 400 | 422;
  readonly onInFlight: OnInFlight;
  readonly waitMs: number; // bound for onInFlight: wait
  readonly onUnknownOutcome: OnUnknownOutcome;
  readonly onExpiredLease: OnExpiredLease;
  /** Set exactly when onExpiredLease is probe (checked at load). */
  readonly outcomeProbe: OutcomeProbe | null;
  readonly onStoreError: OnStoreError;
  readonly storeHeaders: readonly string[]; // lower-case; added to the stored set
  readonly dropHeaders: readonly string[]; // lower-case; removed from the stored set
  // --- protocol profiles (docs/profiles.md) ---
  readonly profile: Profile;
  readonly errorFormat: ErrorFormat;
  readonly keyScope: KeyScope;
  /** Idempotency-Key echoed on every response to a request that carried one. */
  readonly echoKey: boolean;
  /** reference: a 2xx answer with a Location on the upstream's origin is stored without its body; a replay GETs it. */
  readonly record: RecordMode;
  /** The YAML names of the fields whose value the profile's preset gave (for check-config). */
  readonly fromProfile: readonly string[];
}

export interface UpstreamConfig {
  readonly url: string; // origin, e.g. http://127.0.0.1:3000
  readonly timeoutMs: number; // bounds the whole upstream exchange
  readonly connections: number;
  /**
   * upstream.keepAliveTimeout: the longest an idle connection is kept for reuse, whatever the upstream's
   * `Keep-Alive: timeout` hint says; null (unset): 4 s without a hint, the hint less 2 s with one.
   */
  readonly keepAliveTimeoutMs: number | null;
  readonly tls: UpstreamTls | null; // https:// upstreams only
}

export interface StoreConfig {
  readonly postgres: string | null; // null → embedded PGlite
  readonly redis: string | null; // null → no cache
  readonly dataDir: string; // embedded store directory
  readonly poolSize: number;
  /** store.idleTimeout: a pool connection idle this long is closed. */
  readonly idleTimeoutMs: number;
  readonly migrate: boolean; // serve applies migrations at start
  readonly sweepIntervalMs: number;
  readonly sweepBatchSize: number;
  // Store hardening (docs/configuration.md).
  readonly timeoutMs: number; // store.timeout: bound on every store round trip
  readonly preparedStatements: boolean; // false: unnamed statements (PgBouncer transaction mode)
  readonly shardRouting: boolean; // on Citus: each tenant's statements to the node of its shard (docs/scale.md)
}

/** The client listener's timeouts: `listen.*Timeout` (docs/configuration.md). */
export interface ListenTimeouts {
  /** Time a client has to send the request headers (slow-loris headers → 408). */
  readonly headersTimeoutMs: number;
  /** Time a client has to send the whole request, body included (slow-loris bodies → 408). */
  readonly requestTimeoutMs: number;
  /** How long an idle client connection (HTTP/1.1 keep-alive, an HTTP/2 session) is kept open. */
  readonly keepAliveTimeoutMs: number;
  /**
   * Time a client may read nothing of a response whose upstream it holds back (a slow reader) before the proxy
   * cuts it off (src/proxy/slow-client.ts), like nginx's send_timeout. Read by the lifecycle, not by the server.
   */
  readonly sendTimeoutMs: number;
}

export interface LimitsConfig {
  /** Request bodies and recorded responses held in memory by all requests together. */
  readonly maxBufferedBytes: number;
}

export interface Config {
  readonly listen: { readonly host: string; readonly port: number };
  readonly admin: { readonly host: string; readonly port: number } | null;
  readonly adminToken: string | null;
  readonly upstream: UpstreamConfig;
  readonly store: StoreConfig;
  readonly limits: LimitsConfig;
  readonly logLevel: string;
  /** Graceful shutdown: how long in-flight requests get to finish and commit. */
  readonly shutdownTimeoutMs: number;
  readonly routes: readonly RoutePolicy[];
  // --- TLS and HTTP/2 on the listener (docs/configuration.md, Listener) ---
  /** `listen.tls`: null = plain TCP. */
  readonly listenTls: ListenTls | null;
  /** `listen.http2`: HTTP/2 (ALPN h2 over TLS, h2c with prior knowledge without) beside HTTP/1.1. */
  readonly http2: boolean;
  /** `listen.headersTimeout`, `requestTimeout`, `keepAliveTimeout`, `sendTimeout`, defaults applied. */
  readonly listenTimeouts: ListenTimeouts;
  readonly tracing: TracingConfig;
}

// Tracing (docs/configuration.md, docs/operations.md).
export interface TracingConfig {
  /** tracing.enabled, or on when an OTLP endpoint is set (YAML or OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT). */
  readonly enabled: boolean;
  /** The OTLP/HTTP base URL (spans go to <endpoint>/v1/traces); null: the OTEL_* variables or the SDK's default. */
  readonly endpoint: string | null;
  /** null: OTEL_SERVICE_NAME, else "idempotency-proxy". */
  readonly serviceName: string | null;
  /** Parent-based ratio sampler; null: OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on). */
  readonly sampleRatio: number | null;
  /** OTLP/HTTP encoding: tracing.protocol, else OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf. */
  readonly protocol: OtlpProtocol;
}

export type OtlpProtocol = 'http/protobuf' | 'http/json';

// --- TLS (docs/configuration.md, Listener and Upstream) ---
/** File paths; each was readable and parsed when the configuration was loaded. */
export interface ListenTls {
  readonly cert: string;
  readonly key: string;
  /** CA bundle that client certificates must chain to: mTLS, a client without one is refused. */
  readonly clientCa: string | null;
}

export interface UpstreamTls {
  readonly ca: string | null; // CA bundle replacing the system roots
  readonly cert: string | null; // client certificate (with key)
  readonly key: string | null;
  readonly servername: string | null; // SNI and the name the certificate must match
}
