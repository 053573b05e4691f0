import type { IncomingMessage } from 'node:http';
import { Problems } from '../../http/problems.js';
import { NEXT, problem, type Phase } from '../verdict.js';

// Phase "body": buffers the request body up to the route's maxBodyBytes. The
// body is needed whole: it is fingerprinted, and nothing is claimed before it
// has arrived complete (a client that goes away mid-body binds nothing).
// Enforced on shadow routes too: a body that cannot be buffered cannot be
// forwarded either.

export const bodyPhase: Phase = {
  name: 'body',
  run: async (_deps, ctx) => {
    const b = await readBody(ctx.req, ctx.plan!.policy.maxBodyBytes);
    if (b.kind === 'ok') {
      ctx.body = b.body;
      return NEXT;
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
  | { readonly kind: 'aborted' };

const EMPTY = Buffer.alloc(0);

export function readBody(req: IncomingMessage, limit: number): Promise<BodyResult> {
  const declared = req.headers['content-length'];
  if (declared !== undefined) {
    const n = Number(declared);
    if (n > limit) return Promise.resolve({ kind: 'too_large', limit, declared: n });
    if (n === 0) return Promise.resolve({ kind: 'ok', body: EMPTY });
  } else if (req.headers['transfer-encoding'] === undefined) {
    return Promise.resolve({ kind: 'ok', body: EMPTY });
  }
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const finish = (r: BodyResult): void => {
      if (settled) return;
      settled = true;
      req.off('data', onData).off('end', onEnd).off('error', onAbort).off('aborted', onAbort).off('close', onClose);
      resolve(r);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > limit) {
        req.pause();
        finish({ kind: 'too_large', limit, declared: null });
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = (): void => finish({ kind: 'ok', body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) });
    const onAbort = (): void => finish({ kind: 'aborted' });
    const onClose = (): void => {
      if (!req.complete) finish({ kind: 'aborted' });
    };
    req.on('data', onData).on('end', onEnd).on('error', onAbort).on('aborted', onAbort).on('close', onClose);
  });
}
