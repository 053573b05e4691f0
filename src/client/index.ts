export { IdempotentClient } from './client.js';
export type { IdempotentClientOptions, RequestHeaders, RetryEvent } from './options.js';
export type { CallOptions, Method, RequestOptions } from './prepare.js';
export { IdempotentResponse, type ResponseHeaders } from './response.js';
export {
  AbortedError,
  DeadlineExceededError,
  ErrorCodes,
  IdempotentClientError,
  InvalidArgumentError,
  OutcomeUnknownError,
  RequestFailedError,
  RetriesExhaustedError,
  type ErrorCode,
} from './errors.js';
export { backoffCeiling, fullJitterDelay, type BackoffPolicy } from './backoff.js';
export { parseRetryAfter } from './retry-after.js';
export { OUTCOME_UNKNOWN_PROBLEM } from './classify.js';
