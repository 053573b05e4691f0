import { Agent, request } from 'undici';
import { parseRetryAfter } from '../../client/retry-after.js';
import { PROBLEM_BASE } from '../../http/problems.js';

// `verify`, part 1: send N identical requests at the same moment, each on a
// connection of its own, then retry every 409 after its Retry-After until it
// gets a real answer. Only I/O here; the verdict is computed in analyze.ts.

export interface VerifyRequest {
  readonly url: string;
  readonly method: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer | null;
  readonly timeoutMs: number;
}

export interface Answer {
  readonly kind: 'answer';
  readonly status: number;
  /** `Idempotent-Replayed: true`: a stored response, the upstream did not run. */
  readonly replayed: boolean;
  readonly retryAfterS: number | null;
  readonly contentType: string | null;
  /** The proxy's own problem type (`urn:idempotency-proxy:problem:…`), if it answered itself. */
  readonly problemType: string | null;
  readonly body: Buffer;
  readonly ms: number;
}

export interface Failure {
  readonly kind: 'error';
  readonly code: string | null;
  readonly message: string;
  readonly ms: number;
}

export type Attempt = Answer | Failure;

export interface Exchange {
  /** What the request got at first. */
  readonly first: Attempt;
  /** What it got in the end (the same as first unless a 409 was retried). */
  readonly final: Attempt;
  readonly retries: number;
}

export interface RetryPolicy {
  /** Retries of a 409 before giving up on it. */
  readonly retries: number;
  /** Upper bound for one wait, whatever Retry-After says. */
  readonly maxWaitMs: number;
}

function header(h: Record<string, string | string[] | undefined>, name: string): string | null {
  const v = h[name];
  return v === undefined ? null : Array.isArray(v) ? v.join(', ') : v;
}

/** Whole seconds from a Retry-After header (the client library's parser, rounded up). */
export function retryAfterSeconds(value: string | null, now = Date.now()): number | null {
  const ms = value === null ? null : parseRetryAfter(value, now);
  return ms === null ? null : Math.ceil(ms / 1000);
}

function problemType(contentType: string | null, body: Buffer): string | null {
  if (contentType === null || !contentType.includes('problem+json')) return null;
  try {
    const type = (JSON.parse(body.toString('utf8')) as { type?: unknown }).type;
    return typeof type === 'string' && type.startsWith(PROBLEM_BASE) ? type : null;
  } catch {
    return null;
  }
}

async function once(agent: Agent, req: VerifyRequest): Promise<Attempt> {
  const t0 = performance.now();
  try {
    const r = await request(req.url, {
      method: req.method as 'POST',
      headers: req.headers,
      body: req.body ?? undefined,
      dispatcher: agent,
      headersTimeout: req.timeoutMs,
      bodyTimeout: req.timeoutMs,
    });
    const body = Buffer.from(await r.body.arrayBuffer());
    const contentType = header(r.headers, 'content-type');
    return {
      kind: 'answer',
      status: r.statusCode,
      replayed: header(r.headers, 'idempotent-replayed')?.toLowerCase() === 'true',
      retryAfterS: retryAfterSeconds(header(r.headers, 'retry-after')),
      contentType,
      problemType: problemType(contentType, body),
      body,
      ms: performance.now() - t0,
    };
  } catch (err) {
    const e = err as { code?: string; message?: string; cause?: { code?: string } };
    return { kind: 'error', code: e.code ?? e.cause?.code ?? null, message: e.message ?? String(err), ms: performance.now() - t0 };
  }
}

async function settle(agent: Agent, req: VerifyRequest, first: Attempt, policy: RetryPolicy): Promise<Exchange> {
  let final = first;
  let retries = 0;
  while (final.kind === 'answer' && final.status === 409 && retries < policy.retries) {
    const waitMs = Math.min(Math.max(1, final.retryAfterS ?? 1) * 1000, policy.maxWaitMs);
    await new Promise((r) => setTimeout(r, waitMs));
    retries++;
    final = await once(agent, req);
  }
  return { first, final, retries };
}

/** Fires `n` identical requests at once, then settles every 409. */
export async function fireTogether(req: VerifyRequest, n: number, policy: RetryPolicy): Promise<Exchange[]> {
  const agent = new Agent({ connections: null, pipelining: 1, keepAliveTimeout: 1000 });
  try {
    const firsts = await Promise.all(Array.from({ length: n }, () => once(agent, req)));
    return await Promise.all(firsts.map((first) => settle(agent, req, first, policy)));
  } finally {
    await agent.close();
  }
}
