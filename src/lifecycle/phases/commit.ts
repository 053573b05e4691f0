import { StoreUnavailableError, isRolledBack, type UpstreamError } from '../../errors.js';
import { Problems, problemRecord, upstreamProblem } from '../../http/problems.js';
import { cutResponse } from '../../http/respond.js';
import type { Recording } from '../../proxy/record-handler.js';
import { asReference } from '../../proxy/reference.js';
import type { StoredResponse } from '../../store/records.js';
import type { RequestContext } from '../context.js';
import type { LifecycleDeps } from '../deps.js';
import { storeBackoffMs, storePatienceMs } from '../store-patience.js';
import { DONE, problem, type Phase, type Verdict } from '../verdict.js';

// Phase "commit | release": what the upstream exchange binds to the key.
// An answer is committed as the key's record (fenced by the owner token)
// before the client gets its held-back last chunk; a failure is classified by
// when it happened: not sent → released; sent with an unknown outcome →
// a 502/504 problem stored (onUnknownOutcome: store) or the key released.

// A store outage during the commit is retried (src/lifecycle/store-patience.ts):
// the upstream has already run, so the record is worth waiting for.

export const commitPhase: Phase = {
  name: 'commit',
  run: async (deps, ctx) => {
    const recording = ctx.exchange!;
    const error = ctx.upstreamError;
    if (ctx.released) {
      // A releaseOn answer, relayed after the release: nothing to record.
      if (error !== null && !recording.started) return upstreamFailed(error);
      return DONE;
    }
    if (error === null) {
      if (recording.unread) ctx.detail = `the client read nothing of the response for ${deps.sendTimeoutMs} ms: the proxy cut it off; the record is kept`;
      return commit(deps, ctx, record(ctx, recording, deps.upstream.origin), recording.last);
    }
    if (recording.statusCode === 0) return failedBeforeResponse(deps, ctx, error);
    // The body broke off after the status line: the outcome is unknown.
    ctx.outcome = 'upstream_error';
    ctx.detail = error.message;
    cutResponse(ctx.res);
    if (ctx.plan!.policy.onUnknownOutcome === 'release') {
      await release(deps, ctx);
      return DONE;
    }
    // A body cut by upstream.timeout is a timeout (504), any other break a reset (502).
    return commit(deps, ctx, problemRecord(ctx.plan!.dialect, upstreamProblem(error), error.message, ctx.requestId, ctx.key), null);
  },
};

/**
 * The replay record of a completed exchange: the stored headers (lower-case
 * names) and the body, if retained; on a `record: reference` route, a
 * reference instead when the answer qualifies (src/proxy/reference.ts).
 */
function record(ctx: RequestContext, recording: Recording, origin: string): StoredResponse {
  const headers = recording.headers!;
  const storeHeader = ctx.plan!.route.storeHeader;
  const stored: Array<[string, string]> = [];
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i]!.toLowerCase();
    if (storeHeader(name)) stored.push([name, headers[i + 1]!]);
  }
  const rec = { status: recording.statusCode, headers: stored, body: recording.body(), bodyRetained: recording.retained, bodySize: recording.size };
  return ctx.plan!.route.reference ? asReference(rec, ctx.req.url ?? '/', origin) : rec;
}

function upstreamFailed(e: UpstreamError): Verdict {
  // The key was released: the same request may be sent again.
  return problem(upstreamProblem(e), e.message, 'upstream_error', { retryable: true });
}

async function failedBeforeResponse(deps: LifecycleDeps, ctx: RequestContext, e: UpstreamError): Promise<Verdict> {
  if (e.kind === 'not_sent' || ctx.plan!.policy.onUnknownOutcome === 'release') {
    await release(deps, ctx);
    return upstreamFailed(e);
  }
  // Sent, outcome unknown, policy store: the answer is bound to the key, so a
  // retry gets the same 502/504 and the operation never runs twice silently.
  ctx.outcome = 'upstream_error';
  ctx.detail = e.message;
  const p = upstreamProblem(e);
  ctx.status = p.status;
  return commit(deps, ctx, problemRecord(ctx.plan!.dialect, p, e.message, ctx.requestId, ctx.key), null);
}

/**
 * Commits the record (retrying a store outage, or a commit PostgreSQL rolled back, for a while: the upstream has
 * already run), then says how the client's response ends. If the record
 * cannot be committed the client never gets a complete response.
 */
async function commit(deps: LifecycleDeps, ctx: RequestContext, rec: StoredResponse, last: Buffer | null): Promise<Verdict> {
  const claim = ctx.claim!;
  const t0 = performance.now();
  const giveUpAt = t0 + storePatienceMs(claim.leaseMs);
  // Traced and sampled: the record keeps this execution's trace context, for its replays' links (withTrace).
  // The commit's span is made when the round trip has ended, from its clock readings (as the claim's,
  // src/lifecycle/phases/claim.ts).
  const stored = ctx.span === null ? rec : deps.tracing!.withTrace(ctx, rec);
  let outcome;
  for (let i = 0; ; i++) {
    try {
      outcome = await deps.store.commit({ tenantId: claim.tenantId, key: claim.key, ownerToken: claim.ownerToken, response: stored });
      break;
    } catch (err) {
      deps.metrics.storeErrors.inc({ op: 'commit' });
      // An outage, or a commit PostgreSQL rolled back (a deadlock or a serialization conflict it broke), is
      // tried again for as long as the record is worth waiting for; anything else cuts the response at once.
      const outage = err instanceof StoreUnavailableError;
      if (!(outage || isRolledBack(err)) || performance.now() >= giveUpAt) {
        const failedAt = performance.now();
        if (ctx.span !== null) deps.tracing!.storeSpan(ctx, 'commit', t0, failedAt, null, err);
        ctx.storeMs += failedAt - t0;
        deps.logger.error({ requestId: ctx.requestId, err: (err as Error).message }, 'commit failed; the client gets no complete response');
        return { kind: 'cut', outcome: outage ? 'store_error' : 'internal_error', detail: `record could not be committed: ${(err as Error).message}` };
      }
      await new Promise((r) => setTimeout(r, storeBackoffMs(i)));
    }
  }
  const t1 = performance.now();
  if (ctx.span !== null) deps.tracing!.storeSpan(ctx, 'commit', t0, t1, null);
  const ms = t1 - t0;
  ctx.storeMs += ms;
  deps.metrics.storeDuration.labels('commit').observe(ms / 1000);
  if (!outcome.committed) {
    // Our lease was taken over: the record is someone else's now.
    deps.metrics.leaseLost.inc({ route: claim.route });
    return { kind: 'cut', outcome: 'store_error', detail: 'lease was taken over before the commit; response withheld' };
  }
  // kept: the upstream settled the row in its own transaction (docs/co-commit.md); that record
  // stands, and the next replay from PostgreSQL puts it into the cache, never the proxy's copy.
  if (outcome.kept === true) deps.cache?.forget(claim.tenantId, claim.key);
  else deps.cache?.rememberComplete(claim.tenantId, claim.key, ctx.fingerprint, stored, outcome.ttlLeftMs);
  // A stored problem (502/504) has not been answered yet: it is answered as recorded.
  if (last === null && !ctx.res.headersSent) return { kind: 'record', response: rec };
  return { kind: 'end', last };
}

/**
 * Frees the key (fenced by the owner token), so a retry runs again. A store outage, or a release PostgreSQL
 * rolled back, does not hold the request: the release is retried in the background (src/lifecycle/give-back.ts).
 * Any other failure leaves the key claimed until its lease ends.
 */
export async function release(deps: LifecycleDeps, ctx: RequestContext): Promise<void> {
  const claim = ctx.claim!;
  ctx.released = true;
  const t0 = performance.now();
  try {
    await deps.store.release(claim.tenantId, claim.key, claim.ownerToken);
    if (ctx.span !== null) deps.tracing!.storeSpan(ctx, 'release', t0, performance.now(), null);
    deps.cache?.forget(claim.tenantId, claim.key);
  } catch (err) {
    if (ctx.span !== null) deps.tracing!.storeSpan(ctx, 'release', t0, performance.now(), null, err);
    deps.metrics.storeErrors.inc({ op: 'release' });
    const outage = err instanceof StoreUnavailableError;
    if (outage || isRolledBack(err)) {
      deps.logger.warn({ requestId: ctx.requestId, err: (err as Error).message },
        outage ? 'release failed; retried in the background while the store is down' : 'release rolled back by PostgreSQL; retried in the background');
      deps.giveBacks.add(ctx.requestId, claim, 'release');
    } else {
      deps.logger.warn({ requestId: ctx.requestId, err: (err as Error).message }, 'release failed; key stays claimed until its lease ends');
    }
  } finally {
    ctx.storeMs += performance.now() - t0;
  }
}
