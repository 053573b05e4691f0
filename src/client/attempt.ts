import type { Dispatcher } from 'undici';
import type { RawResponse } from './response.js';

/** Everything needed to send one attempt; built once per operation. */
export interface AttemptRequest {
  dispatcher: Dispatcher;
  origin: string;
  path: string;
  method: Dispatcher.HttpMethod;
  headers: Record<string, string | string[]>;
  body: Buffer | null;
}

/** How one attempt ended. Expected outcomes are values; the retry loop decides. */
export type AttemptResult =
  | { kind: 'response'; response: RawResponse }
  /** The attempt's own timer fired before the response was fully read. */
  | { kind: 'timeout'; error: unknown }
  /** A transport error (refused, reset, closed mid-response, …). */
  | { kind: 'error'; error: unknown }
  /** The caller's signal fired. */
  | { kind: 'aborted'; reason: unknown };

/** Thrown into undici as the abort reason when an attempt runs out of time. */
export class AttemptTimeoutError extends Error {
  readonly code = 'IDEMP_CLIENT_ATTEMPT_TIMEOUT';
  constructor(ms: number) {
    super(`attempt timed out after ${Math.round(ms)} ms`);
    this.name = 'AttemptTimeoutError';
  }
}

/**
 * Send one attempt and read the whole response body, within `timeoutMs`.
 * Aborting (timer or caller's signal) cancels the in-flight request.
 */
export async function runAttempt(req: AttemptRequest, timeoutMs: number, signal: AbortSignal | undefined): Promise<AttemptResult> {
  if (signal?.aborted) return { kind: 'aborted', reason: signal.reason };
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new AttemptTimeoutError(timeoutMs));
  }, timeoutMs);
  const onAbort = (): void => controller.abort(signal?.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const res = await req.dispatcher.request({
      origin: req.origin,
      path: req.path,
      method: req.method,
      headers: req.headers,
      body: req.body,
      signal: controller.signal,
    });
    const body = Buffer.from(await res.body.arrayBuffer());
    return { kind: 'response', response: { status: res.statusCode, headers: res.headers, body } };
  } catch (error) {
    if (signal?.aborted) return { kind: 'aborted', reason: signal.reason };
    if (timedOut) return { kind: 'timeout', error };
    return { kind: 'error', error };
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}
