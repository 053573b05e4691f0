// The JSON Schema of the YAML file (docs/configuration.md, every field).
// Every object is closed (additionalProperties: false): an unknown field is an
// error. Shapes and types only; units, addresses, pointers and cross-field
// rules are checked in semantic passes that report alongside these errors.
// `x-kind` is an annotation our error messages use; ajv ignores it.

type Schema = Record<string, unknown>;

const HEADER_NAME = "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$";

const string: Schema = { type: 'string' };
const duration: Schema = { type: ['string', 'number'], 'x-kind': 'duration' };
const size: Schema = { type: ['string', 'number'], 'x-kind': 'size' };
const headerName: Schema = { type: 'string', pattern: HEADER_NAME, 'x-kind': 'header' };
const headerList: Schema = { type: 'array', items: headerName };
const method: Schema = { type: 'string', minLength: 1, 'x-kind': 'method' };

function closed(properties: Record<string, Schema>, extra: Schema = {}): Schema {
  return { type: 'object', properties, additionalProperties: false, ...extra };
}

/** A top-level section: a closed object, or empty (`store:` with nothing under it). */
function section(properties: Record<string, Schema>): Schema {
  return closed(properties, { type: ['object', 'null'] });
}

/** An object with exactly one of `properties` set. */
function exactlyOne(properties: Record<string, Schema>): Schema {
  return closed(properties, { minProperties: 1, maxProperties: 1, 'x-kind': 'exactly-one' });
}

/** `type` too, so ajv coerces an interpolated "422" to 422 before the enum check. */
function enumOf(...values: readonly (string | number)[]): Schema {
  return { type: typeof values[0] === 'number' ? 'integer' : 'string', enum: values };
}

function policyProperties(): Record<string, Schema> {
  return {
    keyHeader: headerName,
    key: exactlyOne({ fromHeader: headerName, fromBody: string }),
    methods: { type: 'array', minItems: 1, items: method },
    required: { type: 'boolean' },
    ttl: duration,
    lease: duration,
    maxBodyBytes: size,
    maxStoredResponseBytes: size,
    tenant: exactlyOne({ fromHeader: headerName, fromHeaderHash: headerName, constant: string, fromClientCert: enumOf('subject') }),
    fingerprint: closed({
      headers: headerList,
      query: { type: 'boolean' },
      json: enumOf('raw', 'canonical'),
      exclude: { type: 'array', items: string },
    }),
    // A status (100–599) or a status class (5xx): numbers get the range check, strings the pattern.
    releaseOn: {
      type: 'array',
      uniqueItems: true,
      items: { type: ['integer', 'string'], minimum: 100, maximum: 599, pattern: '^([1-5][xX]{2}|[1-5][0-9]{2})$', 'x-kind': 'status' },
    },
    mode: enumOf('enforce', 'shadow', 'passthrough'),
    mismatchStatus: enumOf(400, 422),
    onInFlight: enumOf('conflict', 'wait'),
    waitTimeout: duration,
    onUnknownOutcome: enumOf('store', 'release'),
    onExpiredLease: enumOf('reexecute', 'fail', 'probe'),
    // onExpiredLease: probe (docs/configuration.md): the request that asks the upstream whether the operation ran.
    outcomeProbe: closed({ method, path: { type: 'string', minLength: 1 } }, { required: ['method', 'path'] }),
    onStoreError: enumOf('fail', 'passthrough'),
    storeHeaders: headerList,
    dropHeaders: headerList,
    // --- protocol profiles (docs/profiles.md) ---
    profile: enumOf('ietf', 'stripe', 'acp'),
    errorFormat: enumOf('problem', 'stripe', 'acp'),
    keyScope: enumOf('tenant', 'tenantAndPath'),
    echoKey: { type: 'boolean' },
    // Reference records (docs/storage.md, Record kinds).
    record: enumOf('full', 'reference'),
  };
}

// --- TLS and HTTP/2 (docs/configuration.md, Listener) ---
const path: Schema = { type: 'string', minLength: 1 };

/** `listen`: "host:port", or a mapping with the address, TLS files and http2. */
function listenSchema(): Schema {
  return {
    type: ['string', 'object'],
    properties: {
      address: string,
      tls: closed({ cert: path, key: path, clientCa: path }, { required: ['cert', 'key'] }),
      http2: { type: 'boolean' },
      headersTimeout: duration,
      requestTimeout: duration,
      keepAliveTimeout: duration,
      sendTimeout: duration,
    },
    additionalProperties: false,
  };
}

function upstreamTlsSchema(): Schema {
  return closed({ ca: path, cert: path, key: path, servername: { type: 'string', minLength: 1 } });
}

/** A fresh schema object (ajv may annotate what it compiles). */
export function configSchema(): Schema {
  const route = closed(
    {
      name: { type: 'string', pattern: '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$', 'x-kind': 'route-name' },
      match: closed(
        { methods: { type: 'array', minItems: 1, items: method }, path: { type: 'string', minLength: 1 } },
        { required: ['path'] },
      ),
      ...policyProperties(),
    },
    { required: ['name', 'match'] },
  );
  return {
    ...closed({
      listen: listenSchema(),
      admin: { type: ['string', 'boolean', 'null'], 'x-kind': 'admin' },
      adminToken: string,
      upstream: section({ url: string, timeout: duration, connections: { type: 'integer', minimum: 1 }, keepAliveTimeout: duration, tls: upstreamTlsSchema() }),
      store: section({
        postgres: { type: ['string', 'null'] },
        redis: { type: ['string', 'null'] },
        dataDir: { type: 'string', minLength: 1 },
        poolSize: { type: 'integer', minimum: 1 },
        idleTimeout: duration,
        migrate: { type: 'boolean' },
        sweepInterval: duration,
        sweepBatchSize: { type: 'integer', minimum: 1 },
        // Store hardening (docs/configuration.md): bound and statement mode.
        timeout: duration,
        preparedStatements: { type: 'boolean' },
        // Citus only (docs/scale.md): each tenant's statements to the node of its shard.
        shardRouting: { type: 'boolean' },
      }),
      limits: section({ maxBufferedBytes: size }),
      logLevel: enumOf('fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'),
      shutdownTimeout: duration,
      defaults: section(policyProperties()),
      routes: { type: ['array', 'null'], items: route },
      // Tracing (docs/configuration.md, docs/operations.md): OpenTelemetry spans over OTLP/HTTP.
      tracing: section({
        enabled: { type: 'boolean' },
        endpoint: { type: 'string', minLength: 1 },
        serviceName: { type: 'string', minLength: 1 },
        sampleRatio: { type: 'number', minimum: 0, maximum: 1 },
        protocol: enumOf('http/protobuf', 'http/json'),
      }),
    }),
    title: 'idempotency-proxy configuration',
  };
}
