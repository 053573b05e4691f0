import { recordUpstream, type Recorder, type Recording } from '../proxy/relay.js';
import type { UpstreamError } from '../proxy/upstream.js';
import { PROBLEM_CONTENT_TYPE, Problems, problemBody, sendProblem } from '../http/problems.js';
import { StoreUnavailableError } from '../store/db/port.js';
import { claimToken } from '../store/claim-token.js';
import type { StoredResponse } from '../store/records.js';
import type { CompiledRoute } from '../policy/router.js';
import type { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';
import { startHeartbeat, type Heartbeat } from './heartbeat.js';
import { upstreamFailure } from './passthrough.js';
import { waiterId } from './waiters.js';

// Phases "forward" and "commit | release" for a request that owns its key.
// The record is committed before the client receives the end of the
// response; the last chunk is held back until then (relay.ts, record mode).
// A client that goes away changes nothing: the upstream call completes and
// the record is committed.

export interface Claimed {
  readonly tenantId: string;
  readonly key: string;
  readonly ownerToken: string;
  readonly fingerprint: Buffer;
}

// A store outage during the commit: the upstream has already run, so the
// record is worth waiting for. Nobody can take the key over while the store
// is down, and the commit is fenced by the owner token, so retrying is safe
// for as long as the lease would have held the key (at least 30 s); giving
// up early loses the record and lets a retry run the operation again.
const COMMIT_BACKOFF_MS = [100, 200, 400, 800];
const COMMIT_BACKOFF_MAX_MS = 1000;
const COMMIT_PATIENCE_MIN_MS = 30_000;

export function execute(deps: LifecycleDeps, ctx: RequestContext, route: CompiledRoute, body: Buffer, claim: Claimed): Promise<void> {
  return new Promise((resolve, reject) => {
    const run = new Execution(deps, ctx, route, claim, resolve, reject);
    recordUpstream(deps.upstream, ctx.req, ctx.method, body, ctx.res, run, route.policy.maxStoredResponseBytes,
      claimToken(claim.tenantId, claim.key, claim.ownerToken));
  });
}

/** One request that owns its key, from the upstream call to the commit (or release). */
class Execution implements Recorder {
  private readonly hb: Heartbeat;
  private readonly t0: number;

  constructor(
    private readonly deps: LifecycleDeps,
    private readonly ctx: RequestContext,
    private readonly route: CompiledRoute,
    private readonly claim: Claimed,
    private readonly done: () => void,
    private readonly fail: (err: unknown) => void,
  ) {
    deps.metrics.inFlight.inc();
    this.hb = startHeartbeat(deps.store, claim.tenantId, claim.key, claim.ownerToken, route.policy.leaseMs, (err) =>
      deps.logger.warn({ requestId: ctx.requestId, err: (err as Error).message }, 'lease extension failed'),
    );
    this.t0 = performance.now();
  }

  head(recording: Recording, statusCode: number): boolean {
    const ctx = this.ctx;
    ctx.status = statusCode;
    if (!this.route.policy.releaseOn.includes(statusCode)) {
      ctx.outcome = 'executed';
      return true;
    }
    // Rejected before the handler ran (401/403/429 by default): not bound.
    // The key is free before the client sees the answer.
    ctx.outcome = 'rejected';
    release(this.deps, ctx, this.claim).then(() => recording.proceed()).catch(this.fail);
    return false;
  }

  end(recording: Recording, error: UpstreamError | null): void {
    // The upstream exchange ends when its body does: the commit after it is store time.
    const ctx = this.ctx;
    ctx.upstreamMs = performance.now() - this.t0;
    this.settle(recording, error)
      .finally(() => {
        this.hb.stop();
        this.deps.metrics.inFlight.dec();
        this.deps.waiters.wake(waiterId(this.claim.tenantId, this.claim.key));
      })
      .then(this.done, this.fail);
  }

  private async settle(recording: Recording, error: UpstreamError | null): Promise<void> {
    const { deps, ctx, route, claim } = this;
    if (ctx.released) {
      // A rejection, relayed after the release: nothing to record.
      if (error !== null && !recording.started) upstreamFailure(ctx, error);
      return;
    }
    if (error !== null) {
      if (recording.statusCode === 0) return failedBeforeResponse(deps, ctx, route, claim, error);
      // The body broke off after the headers: the outcome is unknown.
      ctx.outcome = 'upstream_error';
      ctx.detail = error.message;
      ctx.res.destroy();
      if (route.policy.onUnknownOutcome === 'store') {
        // A body cut by upstream.timeout is a timeout (504), any other break a reset (502).
        const p = error.kind === 'timeout' ? Problems.upstreamTimeout : Problems.upstreamReset;
        await commit(deps, ctx, route, claim, problemRecord(p, error.message, ctx.requestId), null);
      } else {
        await release(deps, ctx, claim);
      }
      return;
    }
    await commit(deps, ctx, route, claim, record(route, recording), recording.last);
  }
}

/** The replay record of a completed exchange: the stored headers (lower-case names) and the body, if retained. */
function record(route: CompiledRoute, recording: Recording): StoredResponse {
  const headers = recording.headers!;
  const storeHeader = route.storeHeader;
  const stored: Array<[string, string]> = [];
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i]!.toLowerCase();
    if (storeHeader(name)) stored.push([name, headers[i + 1]!]);
  }
  return { status: recording.statusCode, headers: stored, body: recording.body(), bodyRetained: recording.retained, bodySize: recording.size };
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
  // kept: the upstream settled the row in its own transaction (docs/co-commit.md);
  // the record is the settled one, which the next replay from PostgreSQL caches.
  if (outcome.kept === true) deps.cache?.forget(claim.tenantId, claim.key);
  else deps.cache?.rememberComplete(claim.tenantId, claim.key, claim.fingerprint, record, outcome.ttlLeftMs);
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
