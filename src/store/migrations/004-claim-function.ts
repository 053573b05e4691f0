import type { Migration } from './index.js';

// Version 4: the claim of one tenant's keys as one function call, so that a
// duplicate costs one round trip, as a new key does (src/store/sql/claim.ts).
//
// idempotency_claim reads the rows of the keys first (found): a duplicate
// — a replay, a 409, a 422 — is answered by that one read, which writes
// nothing and takes no lock. Only if some keys have no row does it insert
// them (ON CONFLICT DO NOTHING: a key that has a row is left alone,
// unlocked, unwritten), and only if the insert left some alone — a row a
// concurrent claim committed after the read, or one it inserted and
// committed while this insert waited on it — does it read them again. In a
// function each statement takes its own snapshot (READ COMMITTED), so that
// second read sees those rows; all three share the transaction's now(), the
// one clock of the call. Rows are inserted (and locked) in the order of the
// arrays, which the store sorts by key. A row this call inserted carries one
// of its owner tokens (fresh per claim) and is not read back; a key read
// twice comes back twice, the later row last.
//
// On Citus, migrate distributes the function by its first argument,
// colocated with the key table (src/store/migrate.ts): a call is sent whole
// to the worker that holds the tenant's shard (one hop), where both
// statements run locally.
//
// Shipped text: never edit it, add the next number.
export const claimFunction: Migration = {
  version: 4,
  name: 'claim_function',
  sql: String.raw`
CREATE FUNCTION idempotency_claim(
  p_tenant text, p_keys text[], p_fingerprints text[], p_owner_tokens uuid[], p_lease_ms float8[],
  p_ttl_ms float8[], p_on_expired_lease text[], p_routes text[], p_methods text[], p_paths text[])
RETURNS TABLE (inserted boolean, clock float8, idem_key text, state text, owner_token uuid, attempt integer,
               fingerprint bytea, status_code integer, response_headers jsonb, response_body bytea,
               body_retained boolean, body_size bigint, free boolean, lease_over boolean,
               retry_after_s integer, ttl_left_ms float8)
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
         greatest(0, floor(extract(epoch FROM (e.expires_at - now())) * 1000))::float8
    FROM idempotency_keys e
   WHERE e.tenant_id = p_tenant AND e.idem_key = ANY (p_keys);
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
              NULL::integer, NULL::float8;
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
              NULL::integer, NULL::float8;
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
         greatest(0, floor(extract(epoch FROM (e.expires_at - now())) * 1000))::float8
    FROM idempotency_keys e
   WHERE e.tenant_id = p_tenant AND e.idem_key = ANY (p_keys)
     AND (e.owner_token IS NULL OR e.owner_token <> ALL (p_owner_tokens));
END
$fn$;
`,
};
