import type { Migration } from './index.js';

// Version 2: the upstream settles its key in its own transaction
// (idempotency_settle, docs/co-commit.md), and workers mark steps done in
// theirs (idempotency_step + idempotency_steps, docs/chain.md).
//
// Shipped text: never edit it, add the next number. The header names that are
// never stored are the proxy's defaults (src/proxy/headers.ts) as of this
// version; test/store/co-commit.test.ts checks that the two lists agree.
//
// String.raw: the regular expressions' backslashes reach PostgreSQL as written.
export const coCommit: Migration = {
  version: 2,
  name: 'co_commit_and_steps',
  sql: String.raw`
CREATE FUNCTION idempotency_settle(claim text, status integer, headers jsonb, body bytea)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
  part   text[] := string_to_array(claim, '.');
  t      text;
  k      text;
  h      record;
  vals   jsonb;
  lname  text;
  stored jsonb := '[]'::jsonb;
  never_stored constant text[] := ARRAY[
    'connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection',
    'te', 'trailer', 'transfer-encoding', 'upgrade',
    'content-length', 'date', 'set-cookie', 'idempotent-replayed',
    'x-request-id', 'request-id', 'x-correlation-id', 'traceparent', 'tracestate',
    'x-amzn-requestid', 'x-amzn-trace-id', 'x-b3-traceid', 'x-b3-spanid', 'server-timing'];
BEGIN
  -- The token: v1.<base64url tenant>.<base64url key>.<owner token>
  IF claim IS NULL OR cardinality(part) <> 4 OR part[1] <> 'v1'
     OR part[2] !~ '^[A-Za-z0-9_-]*$' OR length(part[2]) % 4 = 1
     OR part[3] !~ '^[A-Za-z0-9_-]+$' OR length(part[3]) % 4 = 1
     OR part[4] !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
    RAISE EXCEPTION 'idempotency_settle: claim is not an Idempotency-Claim token'
      USING ERRCODE = '22023',
            HINT = 'pass the value of the Idempotency-Claim request header exactly as the proxy sent it (v1.<tenant>.<key>.<owner>)';
  END IF;
  t := convert_from(decode(rpad(translate(part[2], '-_', '+/'), (length(part[2]) + 3) / 4 * 4, '='), 'base64'), 'UTF8');
  k := convert_from(decode(rpad(translate(part[3], '-_', '+/'), (length(part[3]) + 3) / 4 * 4, '='), 'base64'), 'UTF8');

  IF status IS NULL OR status < 200 OR status > 599 THEN
    RAISE EXCEPTION 'idempotency_settle: status must be a final HTTP status (200-599), got %', coalesce(status::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;

  -- headers: {"lower-case-name": ["value", ...], ...} -> [[name, value], ...],
  -- the stored form (docs/storage.md), without the headers never stored.
  IF headers IS NOT NULL AND jsonb_typeof(headers) <> 'object' THEN
    RAISE EXCEPTION 'idempotency_settle: headers must be a JSON object mapping header names to arrays of values, got a JSON %', jsonb_typeof(headers)
      USING ERRCODE = '22023';
  END IF;
  FOR h IN SELECT e.key, e.value FROM jsonb_each(coalesce(headers, '{}'::jsonb)) AS e LOOP
    lname := lower(h.key);
    IF lname !~ '^[!#$%&''*+.^_|~0-9a-z\x60-]+$' THEN
      RAISE EXCEPTION 'idempotency_settle: header name "%" is not an HTTP field name', h.key USING ERRCODE = '22023';
    END IF;
    vals := CASE jsonb_typeof(h.value) WHEN 'array' THEN h.value WHEN 'string' THEN jsonb_build_array(h.value) END;
    IF vals IS NULL OR EXISTS (SELECT 1 FROM jsonb_array_elements(vals) AS x(v) WHERE jsonb_typeof(x.v) <> 'string') THEN
      RAISE EXCEPTION 'idempotency_settle: header "%" must map to an array of strings', h.key USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements_text(vals) AS x(v) WHERE x.v ~ '[^\t\x20-\x7e\u0080-\u00ff]') THEN
      RAISE EXCEPTION 'idempotency_settle: a value of header "%" holds a control character or a character outside Latin-1', h.key
        USING ERRCODE = '22023';
    END IF;
    CONTINUE WHEN lname = ANY (never_stored);
    stored := stored || (SELECT jsonb_agg(jsonb_build_array(lname, x.v) ORDER BY x.i)
                           FROM jsonb_array_elements(vals) WITH ORDINALITY AS x(v, i));
  END LOOP;

  -- Fenced by the owner token, as the proxy's own commit is; the UPDATE takes
  -- the row lock, held until the caller's transaction ends.
  UPDATE idempotency_keys
     SET state = 'complete', status_code = status, response_headers = coalesce(stored, '[]'::jsonb),
         response_body = coalesce(body, ''::bytea), body_retained = true,
         body_size = octet_length(coalesce(body, ''::bytea)),
         completed_at = now(), locked_until = NULL
   WHERE tenant_id = t AND idem_key = k AND owner_token = part[4]::uuid AND state = 'in_flight';
  RETURN FOUND;
END
$fn$;

CREATE TABLE idempotency_steps (
  scope      text        NOT NULL,
  step_key   text        NOT NULL,
  expires_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, step_key)
);

CREATE INDEX idempotency_steps_expires_at ON idempotency_steps (expires_at);

CREATE FUNCTION idempotency_step(scope text, key text, ttl interval)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
BEGIN
  IF idempotency_step.scope IS NULL OR idempotency_step.key IS NULL THEN
    RAISE EXCEPTION 'idempotency_step: scope and key must not be NULL' USING ERRCODE = '22023';
  END IF;
  IF ttl IS NULL OR ttl <= interval '0' THEN
    RAISE EXCEPTION 'idempotency_step: ttl must be a positive interval, got %', coalesce(ttl::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  -- A marker whose retention is over is taken as absent (the sweeper deletes it).
  INSERT INTO idempotency_steps AS s (scope, step_key, expires_at, created_at)
  VALUES (idempotency_step.scope, idempotency_step.key, now() + ttl, now())
  ON CONFLICT ON CONSTRAINT idempotency_steps_pkey DO UPDATE
     SET expires_at = EXCLUDED.expires_at, created_at = EXCLUDED.created_at
   WHERE s.expires_at <= now();
  RETURN FOUND;
END
$fn$;
`,
};
