import type { Migration } from './index.js';

// Version 5: the claims of several tenants in one call, for a batch that
// mixes tenants on plain PostgreSQL (src/store/key-store.ts). Where the
// tenant id carries the request path (keyScope: tenantAndPath, the acp
// profile's default) every request path is a tenant of its own, so batches
// mix tenants whenever requests go to different paths; one claim call per
// tenant then cost a round trip, a transaction and a WAL flush per request:
// no group commit at all.
//
// idempotency_claim_tenants runs idempotency_claim (migration 4) once per
// tenant, in the order of p_tenants, each on its slice of the arrays:
// p_ends[i] is the last index of tenant i's keys (its slice starts after the
// previous one's end). Every row comes back with its tenant id first. The
// store sorts the tenants, and each tenant's keys, as every statement of the
// store locks rows: by tenant, then by key (within one tenant: by key), so
// this call and any other statement lock the rows they share in the same
// order. Behaviour per key is idempotency_claim's: the same text runs.
//
// Not used on Citus (docs/scale.md): there a statement must touch one
// tenant, so that it runs on that tenant's shard alone.
//
// Shipped text: never edit it, add the next number.
export const claimTenants: Migration = {
  version: 5,
  name: 'claim_tenants',
  sql: String.raw`
CREATE FUNCTION idempotency_claim_tenants(
  p_tenants text[], p_ends integer[], p_keys text[], p_fingerprints text[], p_owner_tokens uuid[], p_lease_ms float8[],
  p_ttl_ms float8[], p_on_expired_lease text[], p_routes text[], p_methods text[], p_paths text[])
RETURNS TABLE (tenant_id text, inserted boolean, clock float8, idem_key text, state text, owner_token uuid, attempt integer,
               fingerprint bytea, status_code integer, response_headers jsonb, response_body bytea,
               body_retained boolean, body_size bigint, free boolean, lease_over boolean,
               retry_after_s integer, ttl_left_ms float8)
LANGUAGE plpgsql
AS $fn$
DECLARE
  lo integer := 1;
  hi integer;
BEGIN
  IF cardinality(p_ends) <> cardinality(p_tenants) OR p_ends[cardinality(p_ends)] <> cardinality(p_keys) THEN
    RAISE EXCEPTION 'idempotency_claim_tenants: p_ends must end each tenant''s slice of p_keys';
  END IF;
  FOR t IN 1 .. cardinality(p_tenants) LOOP
    hi := p_ends[t];
    RETURN QUERY
    SELECT p_tenants[t], c.*
      FROM idempotency_claim(p_tenants[t], p_keys[lo:hi], p_fingerprints[lo:hi], p_owner_tokens[lo:hi],
                             p_lease_ms[lo:hi], p_ttl_ms[lo:hi], p_on_expired_lease[lo:hi],
                             p_routes[lo:hi], p_methods[lo:hi], p_paths[lo:hi]) AS c;
    lo := hi + 1;
  END LOOP;
END
$fn$;
`,
};
