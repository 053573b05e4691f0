import type { Dialect } from '../http/dialects.js';
import { Problems } from '../http/problems.js';
import { referenceReplayHead } from '../http/respond.js';
import { credentialHeaders, relayReference } from '../proxy/reference.js';
import type { StoredResponse } from '../store/records.js';
import { endChild } from '../tracing/spans.js';
import type { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';
import { problem, type ProblemVerdict } from './verdict.js';

// The replay of a reference record (docs/storage.md, Record kinds): GET the
// stored path from the upstream, then the original status and stored headers
// with the current body. The key is complete and stays so whatever the GET
// gives: the operation never runs again. A GET that fails (no answer, a
// timeout, a status other than 2xx, 404 or 410) is a 502
// reference-unavailable with Retry-After: a retry with the same key asks
// again. 404 or 410 is 410 reference-gone: the operation ran, its resource has
// since been removed.

const RETRY_AFTER_S = 1;

/** Answers the replay; a problem to answer instead comes back (null: answered). */
export async function replayReference(
  deps: LifecycleDeps, ctx: RequestContext, stored: StoredResponse, path: string, dialect: Dialect, echo: boolean,
): Promise<ProblemVerdict | null> {
  const span = ctx.span === null ? null : deps.tracing!.child(ctx, 'reference');
  const got = await relayReference(deps.upstream, path, ctx.req.headers, credentialHeaders(ctx.plan!.policy.tenant), ctx.requestId, ctx.res,
    (current) => ({ status: stored.status, headers: referenceReplayHead(dialect, stored, ctx.requestId, ctx.key, echo, current) }), deps.sendTimeoutMs);
  if (span !== null) endChild(span, got.kind === 'failed' || got.kind === 'cut' ? got.error : undefined);
  const extra = { originalStatus: stored.status };
  switch (got.kind) {
    case 'relayed':
    case 'client_left':
      ctx.outcome = 'replayed';
      ctx.status = stored.status;
      if (got.kind === 'client_left') {
        ctx.detail = got.unread
          ? `the client read nothing of the reference replay for ${deps.sendTimeoutMs} ms: the proxy cut it off`
          : 'the client left during the reference replay';
      }
      return null;
    case 'cut':
      // The current body broke off after the status line went out: the client sees a cut response, never a short one as complete.
      ctx.outcome = 'upstream_error';
      ctx.status = stored.status;
      ctx.detail = `reference ${path}: ${got.error.message}`;
      return null;
    case 'status':
      if (got.status === 404 || got.status === 410) {
        return problem(Problems.referenceGone,
          `the operation ran (original status ${stored.status}), but the resource it created no longer exists (GET of its Location answered ${got.status}); it is not run again`,
          'replayed', { logDetail: `reference ${path}: ${got.status}`, extra: { ...extra, referenceStatus: got.status } });
      }
      return problem(Problems.referenceUnavailable,
        `the operation ran (original status ${stored.status}); its current state could not be fetched (GET of its Location answered ${got.status}); retry with the same key, it is not run again`,
        'upstream_error', { logDetail: `reference ${path}: ${got.status}`, retryAfterS: RETRY_AFTER_S, extra: { ...extra, referenceStatus: got.status } });
    case 'failed':
      return problem(Problems.referenceUnavailable,
        `the operation ran (original status ${stored.status}); its current state could not be fetched (${got.error.message}); retry with the same key, it is not run again`,
        'upstream_error', { logDetail: `reference ${path}: ${got.error.message}`, retryAfterS: RETRY_AFTER_S, extra });
  }
}
