import type { Migration } from './index.js';

// Version 8: a record's trace context in a column of its own.
//
// A traced execution's record kept its traceparent as a reserved last entry
// of response_headers ("idempotency-proxy-trace", src/proxy/headers.ts), so
// that its replays' spans link to it (docs/operations.md, Tracing). Every
// replay then carried those ~90 bytes through jsonb: PostgreSQL wrote them
// out as JSON text and the proxy parsed them back into an array, whether the
// replay was sampled or not. Measured side by side on 2026-12-03, two proxies
// with tracing off, one of them storing the entry: about 2 % more proxy CPU
// per replay from PostgreSQL. Here it is plain text in trace_context, which
// the claim returns as a string.
//
// The claim's functions return one more column, and a function's result
// type cannot be replaced in place: the new ones are idempotency_claim_v2
// and idempotency_claim_tenants_v2, the text of versions 7 and 5 with
// trace_context added. The old functions stay: an instance of an earlier
// version, still running during a rolling upgrade, keeps calling them (its
// prepared statements name them) and stores no trace context, as before.
// On Citus, migrate distributes idempotency_claim_v2 as it does the first
// (src/store/migrate.ts). Records stored with the entry keep it: replays
// read either (src/tracing/spans.ts).
//
// Shipped text: never edit it, add the next number.
export const traceContext: Migration = {
  version: 8,
  name: 'trace_context',
  sql: String.raw`
ALTER TABLE idempotency_keys ADD COLUMN trace_context text;
CREATE FUNCTION idempotency_claim_v2(
  p_tenant text, p_keys text[], p_fingerprints text[], p_owner_tokens uuid[], p_lease_ms float8[],
  p_ttl_ms float8[], p_on_expired_lease text[], p_routes text[], p_methods text[], p_paths text[])
RETURNS TABLE (inserted boolean, clock float8, idem_key text, state text, owner_token uuid, attempt integer,
               fingerprint bytea, status_code integer, response_headers jsonb, response_body bytea,
               body_retained boolean, body_size bigint, free boolean, lease_over boolean,
               retry_after_s integer, ttl_left_ms float8, trace_context text)
LANGUAGE plpgsql
AS $fn$
#variable_conflict use_column
DECLARE
  found_rows integer;
  written integer;
BEGIN
  RETURN QUERY
  SELECT false, extract(epoch FROM now())::float8, e.idem_key, e.state, NULL::uuid, NULL::integer,
         e.fingerprint, e.status_code, e.response_headers, e.response_body, e.body_retained, e.body_size,
         (e.expires_at <= now() AND (e.state <> 'in_flight' OR e.locked_until <= now())),
         (e.state = 'in_flight' AND e.locked_until <= now()),
         greatest(1, ceil(extract(epoch FROM (e.locked_until - now()))))::integer,
         greatest(0, floor(extract(epoch FROM (e.expires_at - now())) * 1000))::float8,
         e.trace_context
    FROM unnest(p_keys) AS q(k)
         CROSS JOIN LATERAL (
           SELECT x.idem_key, x.state, x.owner_token, x.fingerprint, x.status_code, x.response_headers, x.response_body,
                  x.body_retained, x.body_size, x.expires_at, x.locked_until, x.trace_context
             FROM idempotency_keys x
            WHERE x.tenant_id = p_tenant AND x.idem_key = q.k
           OFFSET 0) e;
  GET DIAGNOSTICS found_rows = ROW_COUNT;
  IF found_rows = cardinality(p_keys) THEN
    RETURN;
  END IF;
  IF cardinality(p_keys) = 1 THEN
    -- A lone claim (the usual case when the proxy is not busy): one VALUES
    -- row. On Citus a VALUES insert runs on the shard directly; an INSERT ...
    -- SELECT from arrays is collected first (an intermediate result, even
    -- on the worker), which cost a lone claim there 2-5x as much.
    RETURN QUERY
    INSERT INTO idempotency_keys AS k
      (tenant_id, idem_key, fingerprint, state, owner_token, attempt, on_expired_lease,
       locked_until, expires_at, created_at, route, method, path)
    VALUES (p_tenant, p_keys[1], decode(p_fingerprints[1], 'hex'), 'in_flight', p_owner_tokens[1], 1,
            p_on_expired_lease[1], now() + p_lease_ms[1] * interval '1 millisecond',
            now() + p_ttl_ms[1] * interval '1 millisecond', now(), p_routes[1], p_methods[1], p_paths[1])
    ON CONFLICT (tenant_id, idem_key) DO NOTHING
    RETURNING true, NULL::float8, k.idem_key, k.state, k.owner_token, k.attempt, NULL::bytea, NULL::integer,
              NULL::jsonb, NULL::bytea, NULL::boolean, NULL::bigint, NULL::boolean, NULL::boolean,
              NULL::integer, NULL::float8, NULL::text;
  ELSE
    -- Keys found above conflict and are left alone (or, deleted since,
    -- inserted: then claimed by this call).
    RETURN QUERY
    INSERT INTO idempotency_keys AS k
      (tenant_id, idem_key, fingerprint, state, owner_token, attempt, on_expired_lease,
       locked_until, expires_at, created_at, route, method, path)
    SELECT p_tenant, i.k, decode(i.fp, 'hex'), 'in_flight', i.tok, 1, i.oel,
           now() + i.lease * interval '1 millisecond', now() + i.ttl * interval '1 millisecond',
           now(), i.route, i.method, i.path
      FROM unnest(p_keys, p_fingerprints, p_owner_tokens, p_lease_ms, p_ttl_ms, p_on_expired_lease,
                  p_routes, p_methods, p_paths) WITH ORDINALITY
           AS i(k, fp, tok, lease, ttl, oel, route, method, path, ord)
     ORDER BY i.ord
    ON CONFLICT (tenant_id, idem_key) DO NOTHING
    RETURNING true, NULL::float8, k.idem_key, k.state, k.owner_token, k.attempt, NULL::bytea, NULL::integer,
              NULL::jsonb, NULL::bytea, NULL::boolean, NULL::bigint, NULL::boolean, NULL::boolean,
              NULL::integer, NULL::float8, NULL::text;
  END IF;
  GET DIAGNOSTICS written = ROW_COUNT;
  IF found_rows + written >= cardinality(p_keys) THEN
    RETURN;
  END IF;
  -- Some keys were neither found nor inserted: rows committed after the
  -- first read. Read again (a snapshot of its own), all but this call's rows.
  RETURN QUERY
  SELECT false, extract(epoch FROM now())::float8, e.idem_key, e.state, NULL::uuid, NULL::integer,
         e.fingerprint, e.status_code, e.response_headers, e.response_body, e.body_retained, e.body_size,
         (e.expires_at <= now() AND (e.state <> 'in_flight' OR e.locked_until <= now())),
         (e.state = 'in_flight' AND e.locked_until <= now()),
         greatest(1, ceil(extract(epoch FROM (e.locked_until - now()))))::integer,
         greatest(0, floor(extract(epoch FROM (e.expires_at - now())) * 1000))::float8,
         e.trace_context
    FROM unnest(p_keys) AS q(k)
         CROSS JOIN LATERAL (
           SELECT x.idem_key, x.state, x.owner_token, x.fingerprint, x.status_code, x.response_headers, x.response_body,
                  x.body_retained, x.body_size, x.expires_at, x.locked_until, x.trace_context
             FROM idempotency_keys x
            WHERE x.tenant_id = p_tenant AND x.idem_key = q.k
           OFFSET 0) e
   WHERE e.owner_token IS NULL OR e.owner_token <> ALL (p_owner_tokens);
END
$fn$;
CREATE FUNCTION idempotency_claim_tenants_v2(
  p_tenants text[], p_ends integer[], p_keys text[], p_fingerprints text[], p_owner_tokens uuid[], p_lease_ms float8[],
  p_ttl_ms float8[], p_on_expired_lease text[], p_routes text[], p_methods text[], p_paths text[])
RETURNS TABLE (tenant_id text, inserted boolean, clock float8, idem_key text, state text, owner_token uuid, attempt integer,
               fingerprint bytea, status_code integer, response_headers jsonb, response_body bytea,
               body_retained boolean, body_size bigint, free boolean, lease_over boolean,
               retry_after_s integer, ttl_left_ms float8, trace_context text)
LANGUAGE plpgsql
AS $fn$
DECLARE
  lo integer := 1;
  hi integer;
BEGIN
  IF cardinality(p_ends) <> cardinality(p_tenants) OR p_ends[cardinality(p_ends)] <> cardinality(p_keys) THEN
    RAISE EXCEPTION 'idempotency_claim_tenants_v2: p_ends must end each tenant''s slice of p_keys';
  END IF;
  FOR t IN 1 .. cardinality(p_tenants) LOOP
    hi := p_ends[t];
    RETURN QUERY
    SELECT p_tenants[t], c.*
      FROM idempotency_claim_v2(p_tenants[t], p_keys[lo:hi], p_fingerprints[lo:hi], p_owner_tokens[lo:hi],
                             p_lease_ms[lo:hi], p_ttl_ms[lo:hi], p_on_expired_lease[lo:hi],
                             p_routes[lo:hi], p_methods[lo:hi], p_paths[lo:hi]) AS c;
    lo := hi + 1;
  END LOOP;
END
$fn$;
`,
};
