import type { ServerResponse } from 'node:http';
import { callUpstream, type UpstreamCall } from '../proxy/forward.js';
import { clientResponseHeaders } from '../proxy/headers.js';
import { UpstreamError, classify } from '../proxy/upstream.js';
import { PROBLEM_CONTENT_TYPE, Problems, problemBody, sendProblem } from '../http/problems.js';
import { StoreUnavailableError } from '../store/db/port.js';
import type { StoredResponse } from '../store/records.js';
import type { CompiledRoute } from '../policy/router.js';
import type { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';
import { startHeartbeat } from './heartbeat.js';
import { waiterId } from './waiters.js';

// Phases "forward" and "commit | release" for a request that owns its key.
// The record is committed before the client receives the end of the
// response; the last chunk is held back until then. A client that goes away
// changes nothing: the upstream call completes and the record is committed.

export interface Claimed {
  readonly tenantId: string;
  readonly key: string;
  readonly ownerToken: string;
  readonly fingerprint: Buffer;
}

const EMPTY = Buffer.alloc(0);
// A store outage during the commit: the upstream has already run, so the
// record is worth waiting for. Nobody can take the key over while the store
// is down, and the commit is fenced by the owner token, so retrying is safe
// for as long as the lease would have held the key (at least 30 s); giving
// up early loses the record and lets a retry run the operation again.
const COMMIT_BACKOFF_MS = [100, 200, 400, 800];
const COMMIT_BACKOFF_MAX_MS = 1000;
const COMMIT_PATIENCE_MIN_MS = 30_000;

export async function execute(deps: LifecycleDeps, ctx: RequestContext, route: CompiledRoute, body: Buffer, claim: Claimed): Promise<void> {
  const policy = route.policy;
  deps.metrics.inFlight.inc();
  const hb = startHeartbeat(deps.store, claim.tenantId, claim.key, claim.ownerToken, policy.leaseMs, (err) =>
    deps.logger.warn({ requestId: ctx.requestId, err: (err as Error).message }, 'lease extension failed'),
  );
  const t0 = performance.now();
  let call: UpstreamCall | null = null;
  // The upstream exchange ends when its body does: the commit after it is
  // store time, not upstream time, and the body timer has nothing left to bound.
  const upstreamDone = (): void => {
    call?.finish();
    if (ctx.upstreamMs < 0) ctx.upstreamMs = performance.now() - t0;
  };
  try {
    try {
      call = await callUpstream(deps.upstream, ctx.req, ctx.method, body);
    } catch (err) {
      upstreamDone();
      await failedBeforeResponse(deps, ctx, route, claim, err as UpstreamError);
      return;
    }
    const { response } = call;
    if (policy.releaseOn.includes(response.statusCode)) {
      // Rejected before the handler ran (401/403/429 by default): not bound.
      await release(deps, ctx, claim);
      ctx.outcome = 'rejected';
      ctx.status = response.statusCode;
      await relay(ctx, response, null, call);
      upstreamDone();
      return;
    }
    ctx.outcome = 'executed';
    ctx.status = response.statusCode;
    const stored = await relay(ctx, response, { route, claim }, call);
    upstreamDone();
    if (stored === null) return;
    if ('failure' in stored) {
      // The body broke off after the headers: the outcome is unknown.
      ctx.outcome = 'upstream_error';
      ctx.detail = stored.failure.message;
      ctx.res.destroy();
      if (policy.onUnknownOutcome === 'store') {
        // A body cut by upstream.timeout is a timeout (504), any other break a reset (502).
        const p = stored.failure.kind === 'timeout' ? Problems.upstreamTimeout : Problems.upstreamReset;
        await commit(deps, ctx, route, claim, problemRecord(p, stored.failure.message, ctx.requestId), null);
      } else {
        await release(deps, ctx, claim);
      }
      return;
    }
    await commit(deps, ctx, route, claim, stored.record, stored.last);
  } finally {
    upstreamDone();
    hb.stop();
    deps.metrics.inFlight.dec();
    deps.waiters.wake(waiterId(claim.tenantId, claim.key));
  }
}

async function failedBeforeResponse(deps: LifecycleDeps, ctx: RequestContext, route: CompiledRoute, claim: Claimed, e: UpstreamError): Promise<void> {
  ctx.outcome = 'upstream_error';
  ctx.detail = e.message;
  const p = e.kind === 'not_sent' ? Problems.upstreamUnreachable : e.kind === 'timeout' ? Problems.upstreamTimeout : Problems.upstreamReset;
  ctx.status = p.status;
  if (e.kind === 'not_sent' || route.policy.onUnknownOutcome === 'release') {
    await release(deps, ctx, claim);
    sendProblem(ctx.res, p, e.message, ctx.requestId);
    return;
  }
  // Sent, outcome unknown, policy store: the answer is bound to the key, so a
  // retry gets the same 502/504 and the operation never runs twice silently.
  const record = problemRecord(p, e.message, ctx.requestId);
  await commit(deps, ctx, route, claim, record, null);
}

function problemRecord(p: { slug: string; status: number; title: string }, detail: string, requestId: string): StoredResponse {
  const body = Buffer.from(JSON.stringify(problemBody(p, detail, requestId)));
  return { status: p.status, headers: [['content-type', PROBLEM_CONTENT_TYPE]], body, bodyRetained: true, bodySize: body.length };
}

type Relayed = { record: StoredResponse; last: Buffer | null } | { failure: UpstreamError };

/**
 * Streams the upstream response to the client, holding back the last chunk,
 * and collects the record (up to maxStoredResponseBytes). With `recording`
 * null it streams everything and ends the response itself.
 */
async function relay(
  ctx: RequestContext,
  response: UpstreamCall['response'],
  recording: { route: CompiledRoute; claim: Claimed } | null,
  call: UpstreamCall,
): Promise<Relayed | null> {
  const res = ctx.res;
  const headers = clientResponseHeaders(response.headers);
  if (!res.destroyed) res.writeHead(response.statusCode, headers);
  const max = recording?.route.policy.maxStoredResponseBytes ?? 0;
  const chunks: Buffer[] = [];
  let size = 0;
  let retained = recording !== null;
  let held: Buffer | null = null;
  try {
    for await (const chunk of response.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (retained) {
        if (size <= max) chunks.push(chunk);
        else {
          retained = false;
          chunks.length = 0;
        }
      }
      if (held !== null) await write(res, held);
      held = chunk;
    }
  } catch (err) {
    const failure = classify(err);
    if (recording === null) {
      res.destroy();
      return null;
    }
    return { failure };
  }
  if (recording === null) {
    if (!res.destroyed) res.end(held ?? undefined);
    return null;
  }
  const storeHeader = recording.route.storeHeader;
  const stored: Array<[string, string]> = [];
  for (let i = 0; i < headers.length; i += 2) {
    if (storeHeader(headers[i]!)) stored.push([headers[i]!, headers[i + 1]!]);
  }
  return {
    record: {
      status: response.statusCode,
      headers: stored,
      body: retained ? (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size)) : EMPTY,
      bodyRetained: retained,
      bodySize: size,
    },
    last: held,
  };
}

function write(res: ServerResponse, chunk: Buffer): Promise<void> | void {
  if (res.destroyed) return;
  if (res.write(chunk)) return;
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done).off('close', done);
      resolve();
    };
    res.on('drain', done).on('close', done);
  });
}

/**
 * Commits the record (retrying a store outage for a while: the upstream has
 * already run), then ends the client's response. If the record cannot be
 * committed the client never gets a complete response.
 */
async function commit(
  deps: LifecycleDeps,
  ctx: RequestContext,
  route: CompiledRoute,
  claim: Claimed,
  record: StoredResponse,
  last: Buffer | null,
): Promise<void> {
  const t0 = performance.now();
  const giveUpAt = t0 + Math.max(route.policy.leaseMs, COMMIT_PATIENCE_MIN_MS);
  let outcome;
  for (let i = 0; ; i++) {
    try {
      outcome = await deps.store.commit({ tenantId: claim.tenantId, key: claim.key, ownerToken: claim.ownerToken, response: record });
      break;
    } catch (err) {
      deps.metrics.storeErrors.inc({ op: 'commit' });
      if (!(err instanceof StoreUnavailableError) || performance.now() >= giveUpAt) {
        ctx.storeMs += performance.now() - t0;
        ctx.outcome = 'store_error';
        ctx.detail = `record could not be committed: ${(err as Error).message}`;
        deps.logger.error({ requestId: ctx.requestId, err: (err as Error).message }, 'commit failed; the client gets no complete response');
        ctx.res.destroy();
        return;
      }
      await new Promise((r) => setTimeout(r, COMMIT_BACKOFF_MS[i] ?? COMMIT_BACKOFF_MAX_MS));
    }
  }
  const ms = performance.now() - t0;
  ctx.storeMs += ms;
  deps.metrics.storeDuration.labels('commit').observe(ms / 1000);
  if (!outcome.committed) {
    // Our lease was taken over: the record is someone else's now.
    deps.metrics.leaseLost.inc({ route: route.name });
    ctx.outcome = 'store_error';
    ctx.detail = 'lease was taken over before the commit; response withheld';
    ctx.res.destroy();
    return;
  }
  deps.cache?.rememberComplete(claim.tenantId, claim.key, claim.fingerprint, record, outcome.ttlLeftMs);
  const res = ctx.res;
  if (res.destroyed) return;
  if (last !== null) res.end(last);
  else if (res.headersSent) res.end();
  else {
    // A stored problem (502/504): send it as recorded.
    const flat: string[] = [];
    for (const [n, v] of record.headers) flat.push(n, v);
    flat.push('content-length', String(record.body.length), 'x-request-id', ctx.requestId);
    res.writeHead(record.status, flat);
    res.end(record.body);
  }
}

async function release(deps: LifecycleDeps, ctx: RequestContext, claim: Claimed): Promise<void> {
  ctx.released = true;
  const t0 = performance.now();
  try {
    await deps.store.release(claim.tenantId, claim.key, claim.ownerToken);
    deps.cache?.forget(claim.tenantId, claim.key);
  } catch (err) {
    // The row stays in flight until its lease ends; then a retry takes it over.
    deps.metrics.storeErrors.inc({ op: 'release' });
    deps.logger.warn({ requestId: ctx.requestId, err: (err as Error).message }, 'release failed; key stays claimed until its lease ends');
  } finally {
    ctx.storeMs += performance.now() - t0;
  }
}
