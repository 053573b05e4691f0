import type { IdempotentResponse } from './response.js';

/** Stable error codes. Catch on `err.code`, never on message text. */
export const ErrorCodes = {
  INVALID_ARGUMENT: 'IDEMP_CLIENT_INVALID_ARGUMENT',
  ABORTED: 'IDEMP_CLIENT_ABORTED',
  DEADLINE: 'IDEMP_CLIENT_DEADLINE',
  RETRIES_EXHAUSTED: 'IDEMP_CLIENT_RETRIES_EXHAUSTED',
  OUTCOME_UNKNOWN: 'IDEMP_CLIENT_OUTCOME_UNKNOWN',
  REQUEST_FAILED: 'IDEMP_CLIENT_REQUEST_FAILED',
} as const;

export type ErrorCode = (typeof ErrorCodes)[keyof typeof ErrorCodes];

/** What an operation had done when it failed. */
export interface FailureContext {
  /** Attempts sent (0 when the call failed before the first one). */
  attempts: number;
  /** The key every attempt carried; `null` for PUT/DELETE/GET/HEAD/OPTIONS. */
  idempotencyKey: string | null;
  /** The last HTTP response received, when the last failure was a response. */
  lastResponse?: IdempotentResponse | undefined;
  /** The last transport error, or the abort reason. */
  cause?: unknown;
}

/** Base class of every error this client throws. */
export class IdempotentClientError extends Error {
  readonly code: ErrorCode;
  readonly attempts: number;
  readonly idempotencyKey: string | null;
  readonly lastResponse: IdempotentResponse | undefined;

  constructor(code: ErrorCode, message: string, ctx: FailureContext) {
    super(message, ctx.cause === undefined ? undefined : { cause: ctx.cause });
    this.name = 'IdempotentClientError';
    this.code = code;
    this.attempts = ctx.attempts;
    this.idempotencyKey = ctx.idempotencyKey;
    this.lastResponse = ctx.lastResponse;
  }
}

/** A caller's option or argument is invalid. Nothing was sent. */
export class InvalidArgumentError extends IdempotentClientError {
  constructor(message: string) {
    super(ErrorCodes.INVALID_ARGUMENT, message, { attempts: 0, idempotencyKey: null });
    this.name = 'InvalidArgumentError';
  }
}

/**
 * The caller's AbortSignal fired. Named `AbortError` like the platform's, so
 * `err.name === 'AbortError'` checks keep working. An attempt may have reached
 * the server: retry later with the same `idempotencyKey` to learn the outcome.
 */
export class AbortedError extends IdempotentClientError {
  constructor(ctx: FailureContext) {
    super(ErrorCodes.ABORTED, 'the operation was aborted', ctx);
    this.name = 'AbortError';
  }
}

/** The total deadline ran out (during an attempt, or before the next one could start). */
export class DeadlineExceededError extends IdempotentClientError {
  constructor(deadlineMs: number, ctx: FailureContext) {
    super(ErrorCodes.DEADLINE, `deadline of ${deadlineMs} ms exceeded after ${ctx.attempts} attempt(s)`, ctx);
    this.name = 'DeadlineExceededError';
  }
}

/** Every allowed attempt failed in a retryable way. */
export class RetriesExhaustedError extends IdempotentClientError {
  constructor(ctx: FailureContext) {
    super(ErrorCodes.RETRIES_EXHAUSTED, `gave up after ${ctx.attempts} attempt(s)`, ctx);
    this.name = 'RetriesExhaustedError';
  }
}

/**
 * The proxy answered `409` with problem type
 * `urn:idempotency-proxy:problem:outcome-unknown`: an earlier execution under
 * this key may or may not have happened and an operator must decide. Not retried.
 */
export class OutcomeUnknownError extends IdempotentClientError {
  constructor(ctx: FailureContext) {
    super(ErrorCodes.OUTCOME_UNKNOWN, 'the outcome of an earlier attempt under this key is unknown; an operator must resolve it', ctx);
    this.name = 'OutcomeUnknownError';
  }
}

/** A transport error that retrying cannot fix (TLS, DNS name not found, local misuse). */
export class RequestFailedError extends IdempotentClientError {
  constructor(ctx: FailureContext) {
    super(ErrorCodes.REQUEST_FAILED, 'the request failed with a non-retryable error', ctx);
    this.name = 'RequestFailedError';
  }
}
