import type { UpstreamError } from '../../errors.js';
import { CLAIM_HEADER } from '../../proxy/headers.js';
import { recordUpstream, type Recorder, type Recording } from '../../proxy/record-handler.js';
import { claimToken } from '../../store/claim-token.js';
import type { RequestContext } from '../context.js';
import type { LifecycleDeps } from '../deps.js';
import { NEXT, type Phase, type Verdict } from '../verdict.js';
import { release } from './commit.js';

// Phase "forward", for a request that owns its key: the buffered request
// goes upstream (with an Idempotency-Claim naming the claimed row) and the answer streams to the client as it arrives, recorded
// (src/proxy/record-handler.ts), its last chunk held back for the commit. An
// answer with a releaseOn status (401, 403, 429 by default) is not bound: the
// key is released before the client sees a byte of it, then it is relayed
// unrecorded. The phase ends when the exchange does; the commit phase decides
// what the outcome binds.

export const forwardPhase: Phase = {
  name: 'forward',
  run: (deps, ctx) => new Promise<Verdict>((resolve, reject) => {
    const policy = ctx.plan!.policy;
    const claim = ctx.claim!;
    // The row and owner token, for an upstream that settles the key in its own transaction (docs/co-commit.md).
    const extraHeaders = [CLAIM_HEADER, claimToken(claim.tenantId, claim.key, claim.ownerToken)];
    const t0 = performance.now();
    // The upstream call's span is the parent the upstream sees (docs/operations.md, Tracing); it is written when
    // the call ends, from this phase's two clock readings.
    if (ctx.span !== null) deps.tracing!.upstreamStart(ctx, extraHeaders);
    recordUpstream(deps.upstream, ctx.req, ctx.body, ctx.res, new Forwarding(deps, ctx, resolve, reject, t0), {
      limit: policy.maxStoredResponseBytes,
      timeoutMs: deps.upstream.timeoutMs,
      startedAt: t0,
      sendTimeoutMs: deps.sendTimeoutMs,
      budget: deps.budget,
      extraHeaders,
    });
  }),
};

/** echoKey: the request's key on the upstream's answer too, unless the upstream echoed it itself. */
function echoKey(recording: Recording, key: string): void {
  const h = recording.headers!;
  for (let i = 0; i < h.length; i += 2) if (h[i]!.toLowerCase() === 'idempotency-key') return;
  recording.addHeader('idempotency-key', key);
}

class Forwarding implements Recorder {
  constructor(
    private readonly deps: LifecycleDeps,
    private readonly ctx: RequestContext,
    private readonly resolve: (v: Verdict) => void,
    private readonly reject: (err: unknown) => void,
    /** performance.now() when the request went upstream. */
    private readonly t0: number,
  ) {}

  head(recording: Recording, statusCode: number): boolean {
    const ctx = this.ctx;
    ctx.status = statusCode;
    if (ctx.plan!.policy.echoKey) echoKey(recording, ctx.key!);
    if (!ctx.plan!.route.releases(statusCode)) {
      ctx.outcome = 'executed';
      return true;
    }
    // Rejected before the handler ran: not bound. The key is free before the client sees the answer.
    ctx.outcome = 'rejected';
    release(this.deps, ctx).then(() => recording.proceed(), this.reject);
    return false;
  }

  end(recording: Recording, error: UpstreamError | null): void {
    // The upstream exchange ends when its body does: the commit after it is store time. A slow client's holding
    // the upstream back is not the upstream's time (nor a duration the route's Retry-After should learn).
    const ctx = this.ctx;
    const t1 = performance.now();
    ctx.upstreamMs = t1 - this.t0 - recording.heldMs;
    // A recorded exchange that ran to its end teaches the route's 409 Retry-After.
    if (error === null && !ctx.released) ctx.plan!.durations.observe(ctx.upstreamMs);
    ctx.exchange = recording;
    ctx.upstreamError = error;
    if (ctx.span !== null) this.deps.tracing!.upstreamEnd(ctx, this.t0, t1, recording.statusCode, error ?? undefined);
    this.resolve(NEXT);
  }
}
