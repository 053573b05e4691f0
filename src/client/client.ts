import { performance } from 'node:perf_hooks';
import { Agent, type Dispatcher } from 'undici';
import { runAttempt } from './attempt.js';
import { fullJitterDelay } from './backoff.js';
import { classifyResponse, isRetryableError } from './classify.js';
import {
  AbortedError,
  DeadlineExceededError,
  OutcomeUnknownError,
  RequestFailedError,
  RetriesExhaustedError,
  type FailureContext,
} from './errors.js';
import { resolveOptions, type IdempotentClientOptions, type ResolvedOptions, type RetryEvent } from './options.js';
import { prepareOperation, type CallOptions, type PreparedOperation, type RequestOptions } from './prepare.js';
import { IdempotentResponse } from './response.js';
import { sleep } from './sleep.js';

/**
 * An HTTP client for APIs behind idempotency-proxy (or any server that honours
 * `Idempotency-Key`). One call is one logical operation: it gets one key,
 * and every retry of it carries that same key.
 */
export class IdempotentClient {
  readonly #opts: ResolvedOptions;
  readonly #dispatcher: Dispatcher;
  readonly #ownsDispatcher: boolean;

  constructor(options: IdempotentClientOptions) {
    this.#opts = resolveOptions(options);
    this.#ownsDispatcher = this.#opts.dispatcher === null;
    this.#dispatcher = this.#opts.dispatcher ?? new Agent();
  }

  /** Send one operation, retrying it as needed; resolves with the final answer. */
  request(options: RequestOptions): Promise<IdempotentResponse> {
    let op: PreparedOperation;
    try {
      op = prepareOperation(options, this.#opts, this.#dispatcher);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#execute(op);
  }

  post(path: string, options: CallOptions = {}): Promise<IdempotentResponse> {
    return this.request({ ...options, method: 'POST', path });
  }

  patch(path: string, options: CallOptions = {}): Promise<IdempotentResponse> {
    return this.request({ ...options, method: 'PATCH', path });
  }

  put(path: string, options: CallOptions = {}): Promise<IdempotentResponse> {
    return this.request({ ...options, method: 'PUT', path });
  }

  delete(path: string, options: CallOptions = {}): Promise<IdempotentResponse> {
    return this.request({ ...options, method: 'DELETE', path });
  }

  get(path: string, options: CallOptions = {}): Promise<IdempotentResponse> {
    return this.request({ ...options, method: 'GET', path });
  }

  /** Close the connection pool if the client created it (a caller's dispatcher is left open). */
  async close(): Promise<void> {
    if (this.#ownsDispatcher) await this.#dispatcher.close();
  }

  async #execute(op: PreparedOperation): Promise<IdempotentResponse> {
    const { idempotencyKey, signal } = op;
    const deadlineAt = performance.now() + op.deadlineMs;
    let attempts = 0;
    let lastResponse: IdempotentResponse | undefined;
    let lastError: unknown;
    const ctx = (): FailureContext => ({ attempts, idempotencyKey, lastResponse, cause: lastError });

    if (signal?.aborted) throw new AbortedError({ ...ctx(), cause: signal.reason });
    for (;;) {
      const remaining = deadlineAt - performance.now();
      if (remaining <= 0) throw new DeadlineExceededError(op.deadlineMs, ctx());
      const deadlineBound = remaining <= op.attemptTimeoutMs;
      attempts++;
      const result = await runAttempt(op.request, Math.min(op.attemptTimeoutMs, remaining), signal);

      let retryAfterMs: number | null = null;
      let event: Pick<RetryEvent, 'reason' | 'status' | 'error'>;
      switch (result.kind) {
        case 'aborted':
          throw new AbortedError({ ...ctx(), cause: result.reason });
        case 'timeout':
          lastError = result.error; // lastResponse stays: the last retryable answer, if any
          if (deadlineBound) throw new DeadlineExceededError(op.deadlineMs, ctx());
          event = { reason: 'timeout', error: result.error };
          break;
        case 'error':
          lastError = result.error; // lastResponse stays: the last retryable answer, if any
          if (!isRetryableError(result.error)) throw new RequestFailedError(ctx());
          event = { reason: 'network', error: result.error };
          break;
        case 'response': {
          const { status } = result.response;
          const response = new IdempotentResponse(result.response, {
            attempts,
            idempotencyKey,
            deletedEarlier: op.request.method === 'DELETE' && status === 404 && attempts > 1,
          });
          const decision = classifyResponse(result.response, Date.now());
          if (decision.kind === 'final') return response;
          [lastResponse, lastError] = [response, undefined];
          if (decision.kind === 'outcome_unknown') throw new OutcomeUnknownError(ctx());
          retryAfterMs = decision.retryAfterMs;
          event = { reason: 'status', status };
          break;
        }
      }

      if (attempts >= op.maxAttempts) throw new RetriesExhaustedError(ctx());
      const delayMs = this.#delay(attempts, retryAfterMs);
      if (performance.now() + delayMs >= deadlineAt) throw new DeadlineExceededError(op.deadlineMs, ctx());
      this.#notify({ ...event, attempt: attempts, delayMs, idempotencyKey });
      if (!(await sleep(delayMs, signal))) throw new AbortedError({ ...ctx(), cause: signal?.reason });
    }
  }

  /**
   * Full-jitter exponential backoff; a `Retry-After` raises the wait to at
   * least what the server asked. Either way capped at `maxDelayMs`.
   */
  #delay(retry: number, retryAfterMs: number | null): number {
    const jitter = fullJitterDelay(retry, this.#opts, this.#opts.random);
    const wanted = retryAfterMs === null ? jitter : Math.max(retryAfterMs, jitter);
    return Math.min(wanted, this.#opts.maxDelayMs);
  }

  #notify(event: RetryEvent): void {
    if (this.#opts.onRetry === null) return;
    try {
      this.#opts.onRetry(event);
    } catch {
      // A logging hook must not change the operation's outcome.
    }
  }
}
