// Shared test inputs (not a test file).

/** The example file of docs/contract.md (Configuration), verbatim: test/docs/contract.test.ts checks it. */
export const CONTRACT_EXAMPLE = `
listen: 0.0.0.0:8080
admin: 127.0.0.1:9090            # /metrics /healthz /readyz /admin/*
upstream:
  url: http://127.0.0.1:3000
  timeout: 30s
  connections: 128
store:
  postgres: \${DATABASE_URL}      # unset → embedded store
  redis: \${REDIS_URL}            # unset → no cache
defaults:                         # every route inherits these
  keyHeader: Idempotency-Key
  methods: [POST, PATCH]
  required: false
  ttl: 24h
  lease: 90s
  maxBodyBytes: 1MiB
  maxStoredResponseBytes: 1MiB
  tenant: { fromHeaderHash: authorization }
  fingerprint: { headers: [content-type], query: true, json: raw }
  releaseOn: [401, 403, 429]
  mode: enforce                   # enforce | shadow | passthrough
  mismatchStatus: 422
  onInFlight: conflict            # conflict | wait
  onUnknownOutcome: store
  onExpiredLease: reexecute
  onStoreError: fail
routes:
  - name: payments
    match: { methods: [POST], path: /v1/payments/** }
    required: true
  - name: psp-webhooks
    match: { methods: [POST], path: /webhooks/psp }
    key: { fromBody: /id }           # gateway event id
  - name: everything-else
    match: { path: /** }
    mode: passthrough
`;
