import { hash, randomUUID } from 'node:crypto';
import { isIP } from 'node:net';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { KeyNotFoundError, NotOutcomeUnknownError, RESOLUTIONS, viewOfRecord, type KeyOperations, type Resolution } from '../admin/keys.js';
import { AdminInputError, LIST_FIELDS, parseListQuery, storable, type ListParams } from '../admin/query.js';
import { keyHash, type Logger } from '../log/logger.js';
import { isUnavailable } from '../store/db/pg-errors.js';
import { PROBLEM_BASE, PROBLEM_CONTENT_TYPE } from './problems.js';

// The admin API for keys (docs/operations.md, Admin API): /admin/keys on the
// admin listener, JSON in and out, problem+json errors naming the field. The
// operations are src/admin/keys.ts, shared with the CLI. Every call is
// logged with who (token fingerprint, remote address) and what.

export interface KeysApiDeps {
  readonly ops: KeyOperations;
  /** The proxy's replay cache: a purged or resolved key's cached copy is dropped. */
  readonly cache: { forget(tenantId: string, key: string): void } | null;
  readonly logger: Logger;
  /** Configured adminToken (null: none). */
  readonly token: string | null;
  /** The admin listener's host: without a token the key API answers only on loopback. */
  readonly host: string;
}

type Who = { readonly token: string | null; readonly remote: string };
type Audit = Record<string, unknown>;
interface Call {
  readonly id: string;
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly audit: Audit;
}

/** Between the two cache deletions after a purge: a replay racing it cannot put the copy back. */
const REFILL_SETTLE_MS = 500;
const MAX_JSON_BYTES = 4096;

export function isLoopbackHost(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1' || /^::ffff:127\./i.test(host);
}

const fingerprint = (bearer: string | undefined): string | null => {
  const m = /^Bearer\s+(.+)$/i.exec(bearer ?? '');
  return m === null ? null : `sha256:${hash('sha256', m[1]!, 'hex').slice(0, 12)}`;
};

function send(call: Call, status: number, body: unknown, problem = false, extra: Record<string, string> = {}): void {
  const s = JSON.stringify(body);
  call.audit.status = status;
  call.res.writeHead(status, {
    'content-type': problem ? PROBLEM_CONTENT_TYPE : 'application/json',
    'content-length': Buffer.byteLength(s), 'cache-control': 'no-store', 'x-request-id': call.id, ...extra,
  });
  call.res.end(s);
}

function problem(call: Call, status: number, slug: string, title: string, detail: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}): void {
  call.audit.problem = slug;
  send(call, status, { type: `${PROBLEM_BASE}admin-${slug}`, title, status, detail, requestId: call.id, ...extra }, true, headers);
}

function invalid(call: Call, field: string, reason: string, status = 400): void {
  const title = status === 404 ? 'No such tenant' : 'Invalid parameter';
  problem(call, status, status === 404 ? 'tenant-unknown' : 'invalid-param', title, `${field}: ${reason}`, { 'invalid-params': [{ name: field, reason }] });
}

/** Reads a small JSON object body; null after answering a problem. */
async function jsonBody(call: Call): Promise<Record<string, unknown> | null> {
  const type = String(call.req.headers['content-type'] ?? '');
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    problem(call, 415, 'unsupported-media-type', 'Unsupported media type', 'send the body as Content-Type: application/json');
    return null;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of call.req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > MAX_JSON_BYTES) {
      invalid(call, 'body', `larger than ${MAX_JSON_BYTES} bytes`);
      return null;
    }
    chunks.push(c);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    invalid(call, 'body', 'is not JSON');
    return null;
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    invalid(call, 'body', 'must be a JSON object, e.g. {"as":"executed"}');
    return null;
  }
  return parsed as Record<string, unknown>;
}

/** A path segment decoded; null after answering a problem. A NUL in it throws AdminInputError (answered by the caller's catch). */
function segment(call: Call, raw: string, field: string): string | null {
  let v: string;
  try {
    v = decodeURIComponent(raw);
  } catch {
    invalid(call, field, 'malformed percent-encoding in the path');
    return null;
  }
  return storable(field, v);
}

export function createKeysApi(deps: KeysApiDeps): (req: IncomingMessage, res: ServerResponse, path: string, authorized: boolean) => void {
  const openWithoutToken = deps.token === null && isLoopbackHost(deps.host);
  const forget = (tenantId: string, key: string): void => {
    if (deps.cache === null) return;
    deps.cache.forget(tenantId, key);
    setTimeout(() => deps.cache?.forget(tenantId, key), REFILL_SETTLE_MS).unref();
  };

  const list = async (call: Call, url: URL): Promise<void> => {
    const params: ListParams = {};
    for (const [name, value] of url.searchParams) {
      if (!(LIST_FIELDS as readonly string[]).includes(name)) return invalid(call, name, `unknown parameter; known: ${LIST_FIELDS.join(', ')}`);
      if (name in params) return invalid(call, name, 'given more than once');
      params[name as keyof ListParams] = value;
    }
    const q = parseListQuery(params);
    call.audit.filters = { state: q.state, route: q.route, tenantId: q.tenantId, olderThanMs: q.olderThanMs, limit: q.limit, body: q.withBody, cursor: q.cursor !== null };
    const page = await deps.ops.list(q);
    call.audit.listed = page.keys.length;
    send(call, 200, page);
  };

  const one = async (call: Call, tenantId: string, key: string, action: string | undefined, url: URL): Promise<void> => {
    call.audit.tenantId = tenantId;
    call.audit.key = keyHash(tenantId, key);
    const method = call.req.method;
    if (action === undefined && method === 'GET') {
      for (const name of url.searchParams.keys()) if (name !== 'body') return invalid(call, name, 'unknown parameter; known: body');
      const body = url.searchParams.get('body');
      if (body !== null && body !== 'true' && body !== 'false') return invalid(call, 'body', 'must be true or false');
      call.audit.op = 'show';
      const rec = await deps.ops.show(tenantId, key, body === 'true');
      if (rec === null) return notFound(call);
      return send(call, 200, { ...viewOfRecord(rec, body === 'true'), expired: rec.expired });
    }
    if (action === undefined && method === 'DELETE') {
      call.audit.op = 'purge';
      const was = await deps.ops.purge(tenantId, key);
      if (was === null) return notFound(call);
      forget(tenantId, key);
      call.audit.was = was;
      return send(call, 200, { purged: true, tenantId, key, was });
    }
    if (action === 'resolve' && method === 'POST') {
      call.audit.op = 'resolve';
      const body = await jsonBody(call);
      if (body === null) return;
      for (const name of Object.keys(body)) if (name !== 'as') return invalid(call, name, 'unknown field; known: as');
      if (!RESOLUTIONS.includes(body.as as Resolution)) return invalid(call, 'as', `must be one of ${RESOLUTIONS.join(', ')}`);
      const as = body.as as Resolution;
      call.audit.as = as;
      await deps.ops.resolve(tenantId, key, as);
      forget(tenantId, key);
      const rec = as === 'executed' ? await deps.ops.show(tenantId, key, false) : null;
      return send(call, 200, { resolved: as, tenantId, key, record: rec === null ? null : viewOfRecord(rec, false) });
    }
    const allow = action === undefined ? 'GET, DELETE' : 'POST';
    problem(call, 405, 'method-not-allowed', 'Method not allowed', `${method} is not allowed here; allowed: ${allow}`, {}, { allow });
  };

  const route = async (call: Call): Promise<void> => {
    const url = new URL(call.req.url ?? '/', 'http://admin');
    const parts = (call.req.url ?? '/').split('?')[0]!.split('/').slice(3); // '', 'admin', 'keys', ...
    if (parts.length === 0 || (parts.length === 1 && parts[0] === '')) {
      call.audit.op = 'list';
      if (call.req.method !== 'GET') return problem(call, 405, 'method-not-allowed', 'Method not allowed', 'only GET lists keys', {}, { allow: 'GET' });
      return list(call, url);
    }
    if (parts.length < 2 || parts.length > 3 || (parts.length === 3 && parts[2] !== 'resolve')) {
      return problem(call, 404, 'not-found', 'Not found', 'paths: /admin/keys, /admin/keys/{tenantId}/{key}, /admin/keys/{tenantId}/{key}/resolve (percent-encode / and other reserved characters)');
    }
    const tenantId = segment(call, parts[0]!, 'tenantId');
    const key = tenantId === null ? null : segment(call, parts[1]!, 'key');
    if (tenantId === null || key === null) return;
    if (key === '') return invalid(call, 'key', 'is empty');
    return one(call, tenantId, key, parts[2], url);
  };

  return (req, res, path, authorized) => {
    const who: Who = { token: fingerprint(req.headers.authorization), remote: `${req.socket.remoteAddress}:${req.socket.remotePort}` };
    // The path names the key: logged as a template, the key only as its hash.
    const template = path === '/admin/keys' || path === '/admin/keys/' ? '/admin/keys'
      : path.endsWith('/resolve') ? '/admin/keys/{tenantId}/{key}/resolve' : '/admin/keys/{tenantId}/{key}';
    const call: Call = { id: randomUUID(), req, res, audit: { method: req.method, path: template } };
    const done = (): void => {
      deps.logger.info({ admin: 'keys', requestId: call.id, who, ...call.audit }, 'admin call');
    };
    if (deps.token === null && !openWithoutToken) {
      problem(call, 403, 'token-required', 'Admin token required',
        'the key API is off: the admin listener is not on a loopback address and no adminToken is configured (docs/operations.md, Admin API)');
      return done();
    }
    if (!authorized) {
      problem(call, 401, 'unauthorized', 'Unauthorized', 'this path requires Authorization: Bearer <adminToken>', {},
        { 'www-authenticate': 'Bearer realm="idempotency-proxy admin"' });
      return done();
    }
    route(call).catch((err: unknown) => {
      if (err instanceof AdminInputError) return invalid(call, err.field, err.reason, err.status);
      if (err instanceof KeyNotFoundError) return notFound(call);
      if (err instanceof NotOutcomeUnknownError) {
        return problem(call, 409, 'not-outcome-unknown', 'Key is not outcome_unknown', err.message, { state: err.state });
      }
      call.audit.err = (err as Error).message;
      if (call.res.headersSent) return call.res.destroy();
      if (!isUnavailable(err)) return problem(call, 500, 'internal-error', 'Internal error', 'an unexpected fault (logged with this request id)');
      return problem(call, 503, 'store-unavailable', 'Key store unavailable', 'the key store did not answer; try again', {}, { 'retry-after': '1' });
    }).finally(done);
  };
}

function notFound(call: Call): void {
  problem(call, 404, 'key-not-found', 'No such key', 'no record for this key under this tenant id (or it expired and acts as absent)');
}
