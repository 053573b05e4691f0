import type { IncomingMessage } from 'node:http';
import { Problems } from '../../http/problems.js';
import type { MemoryBudget } from '../budget.js';
import { NEXT, problem, type Phase } from '../verdict.js';

// Phase "body": buffers the request body up to the route's maxBodyBytes,
// within the memory budget all requests share (limits.maxBufferedBytes). The
// body is needed whole: it is fingerprinted, and nothing is claimed before it
// has arrived complete (a client that goes away mid-body binds nothing).
// Enforced on shadow routes too: a body that cannot be buffered cannot be
// forwarded either.

export const bodyPhase: Phase = {
  name: 'body',
  run: async (deps, ctx) => {
    const b = await readBody(ctx.req, ctx.plan!.policy.maxBodyBytes, deps.budget);
    if (b.kind === 'ok') {
      ctx.body = b.body;
      ctx.buffered = b.body.length;
      return NEXT;
    }
    if (b.kind === 'over_budget') {
      // limits.maxBufferedBytes: refused before anything is claimed; retrying later is safe. The
      // connection stays open: Node reads the unread body and drops it, so the client sees the answer.
      return problem(Problems.overloaded, 'the proxy holds as many request and response bytes in memory as it may (limits.maxBufferedBytes); retry after the time in Retry-After',
        'rejected', { retryAfterS: 1 });
    }
    if (b.kind === 'aborted') {
      return problem(Problems.bodyIncomplete, 'the request body ended before its declared length', 'rejected', { logDetail: 'client aborted the request body' });
    }
    return problem(Problems.bodyTooLarge, `the request body is larger than this route's limit of ${b.limit} bytes`, 'rejected', { close: true });
  },
};

export type BodyResult =
  | { readonly kind: 'ok'; readonly body: Buffer }
  | { readonly kind: 'too_large'; readonly limit: number; readonly declared: number | null }
  | { readonly kind: 'over_budget' }
  | { readonly kind: 'aborted' };

const EMPTY = Buffer.alloc(0);
const EMPTY_BODY: BodyResult = { kind: 'ok', body: EMPTY };
const OVER_BUDGET: BodyResult = { kind: 'over_budget' };

/**
 * Reads the body whole, holding its bytes in `budget` (given back here unless
 * the result is ok: then the caller gives `body.length` back when done).
 */
export function readBody(req: IncomingMessage, limit: number, budget: MemoryBudget): Promise<BodyResult> {
  const declared = req.headers['content-length'];
  let taken = 0;
  if (declared !== undefined) {
    const n = Number(declared);
    if (n > limit) return Promise.resolve({ kind: 'too_large', limit, declared: n });
    if (n === 0) return Promise.resolve(EMPTY_BODY);
    // The whole declared body, before a byte of it is read.
    if (!budget.tryTake(n)) return Promise.resolve(OVER_BUDGET);
    taken = n;
  } else if (req.headers['transfer-encoding'] === undefined) {
    return Promise.resolve(EMPTY_BODY);
  }
  return new Promise((resolve) => {
    // A declared length is read into one buffer of that size: no second copy
    // of the body (a concatenation) while it is held.
    const whole = taken > 0 ? Buffer.allocUnsafe(taken) : null;
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const finish = (r: BodyResult): void => {
      if (settled) return;
      settled = true;
      req.off('data', onData).off('end', onEnd).off('error', onAbort).off('aborted', onAbort).off('close', onClose);
      if (r.kind !== 'ok') budget.give(taken);
      else if (taken !== size) budget.give(taken - size);
      resolve(r);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > limit) {
        req.pause();
        finish({ kind: 'too_large', limit, declared: null });
        return;
      }
      // A chunked body is held chunk by chunk.
      if (size > taken) {
        if (!budget.tryTake(size - taken)) {
          req.pause();
          finish(OVER_BUDGET);
          return;
        }
        taken = size;
      }
      if (whole !== null) chunk.copy(whole, size - chunk.length);
      else chunks.push(chunk);
    };
    const onEnd = (): void => {
      if (whole !== null) finish(size === whole.length ? { kind: 'ok', body: whole } : { kind: 'aborted' });
      else finish({ kind: 'ok', body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) });
    };
    const onAbort = (): void => finish({ kind: 'aborted' });
    const onClose = (): void => {
      if (!req.complete) finish({ kind: 'aborted' });
    };
    req.on('data', onData).on('end', onEnd).on('error', onAbort).on('aborted', onAbort).on('close', onClose);
  });
}
