import type { Migration } from './index.js';

// Version 7: the claim's reads probe the primary key once per key, whatever
// the planner believes about the table.
//
// Version 4 read a batch's rows with tenant_id = p_tenant AND idem_key =
// ANY (p_keys). Its plan is cached per session (plpgsql, and the sessions'
// force_generic_plan: src/store/db/pg.ts), and a plan made while the table
// had no statistics — a new deployment before autovacuum's first ANALYZE
// with rows; migration 6's n_distinct only takes effect then — estimates a
// tenant at 1/200 of a table of about one row: the cheapest plan scans the
// tenant's range of the primary key and filters idem_key. It stays cached as
// the table grows, and every claim, replays included, then reads all of the
// tenant's rows. Seen on 2026-12-02: a replay's read took 6 324 buffers and
// 5 ms at 30 000 rows (4 buffers after the first ANALYZE), and new keys/s
// fell from 1 500 to 330 within 80 s of a fresh database.
//
// Here each key is a lookup of its own: a LATERAL subquery with both key
// columns equal to scalars, kept apart from the join by OFFSET 0 (a
// subquery PostgreSQL may not pull up into the join), so the only plan is
// the unique probe. Everything else is version 4's text, unchanged.
//
// Shipped text: never edit it, add the next number.
export const claimProbes: Migration = {
  version: 7,
  name: 'claim_probes',
  sql: String.raw`
CREATE OR REPLACE FUNCTION idempotency_claim(
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
    FROM unnest(p_keys) AS q(k)
         CROSS JOIN LATERAL (
           SELECT x.idem_key, x.state, x.owner_token, x.fingerprint, x.status_code, x.response_headers, x.response_body,
                  x.body_retained, x.body_size, x.expires_at, x.locked_until
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
    FROM unnest(p_keys) AS q(k)
         CROSS JOIN LATERAL (
           SELECT x.idem_key, x.state, x.owner_token, x.fingerprint, x.status_code, x.response_headers, x.response_body,
                  x.body_retained, x.body_size, x.expires_at, x.locked_until
             FROM idempotency_keys x
            WHERE x.tenant_id = p_tenant AND x.idem_key = q.k
           OFFSET 0) e
   WHERE e.owner_token IS NULL OR e.owner_token <> ALL (p_owner_tokens);
END
$fn$;
`,
};
