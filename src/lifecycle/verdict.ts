import type { ProblemDef } from '../http/problems.js';
import type { Outcome } from '../metrics/metrics.js';
import type { StoredResponse } from '../store/records.js';
import type { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';

// What a phase returns (docs/lifecycle.md): go on to the next phase, or how
// the request is answered. Expected outcomes are verdicts; only faults throw.
// The respond phase (respond.ts) carries out the final one.

/** The phases, in the order a request meets them; the same names in logs, metrics and docs/lifecycle.md. */
export const PHASE_NAMES = ['framing', 'route', 'body', 'identify', 'lookaside', 'claim', 'probe', 'forward', 'commit', 'respond'] as const;
export type PhaseName = (typeof PHASE_NAMES)[number];

/** What enforcement would have done, on a shadow route (logged as `shadow`). */
export type ShadowDecision = 'replayed' | 'conflict' | 'mismatch' | 'rejected';

export interface ProblemVerdict {
  readonly kind: 'problem';
  readonly problem: ProblemDef;
  /** The problem's `detail`, for the client. */
  readonly detail: string;
  readonly outcome: Outcome;
  /** The request log's `detail` (null: none). */
  readonly logDetail: string | null;
  readonly status?: number;
  readonly retryAfterS?: number;
  readonly close?: boolean;
  /** Overrides the catalogue's `retryable` (a 502/504 whose key was released). */
  readonly retryable?: boolean;
  /** Members beside the standard ones (a reference replay's originalStatus). */
  readonly extra?: Record<string, unknown>;
}

export interface ReplayVerdict {
  readonly kind: 'replay';
  readonly response: StoredResponse;
  readonly ttlLeftMs?: number;
}

export type Verdict =
  /** On to the next phase. */
  | { readonly kind: 'next' }
  /** A proxy-made problem. */
  | ProblemVerdict
  /** A duplicate: the stored record. `ttlLeftMs` set: read from PostgreSQL, so put back into the cache. */
  | ReplayVerdict
  /** The first answer of a record the proxy stored itself (a 502/504 problem record). */
  | { readonly kind: 'record'; readonly response: StoredResponse }
  /** The recorded response streamed; its held-back last chunk (or nothing) ends it: the record is committed. */
  | { readonly kind: 'end'; readonly last: Buffer | null }
  /** Forwarded untouched, undeduplicated (no key; shadow; store down on a passthrough route). */
  | { readonly kind: 'forward'; readonly outcome: 'passthrough' | 'store_error' }
  /** The client's connection is cut: it must never see a complete response whose record is not committed. */
  | { readonly kind: 'cut'; readonly outcome: Outcome; readonly detail: string }
  /** Already answered (a released answer relayed by the upstream exchange). */
  | { readonly kind: 'done' };

export interface Phase {
  readonly name: PhaseName;
  run(deps: LifecycleDeps, ctx: RequestContext): Verdict | Promise<Verdict>;
}

/** A phase that always answers at once (framing, route: the pass-through path has no promise in it). */
export interface SyncPhase extends Phase {
  run(deps: LifecycleDeps, ctx: RequestContext): Verdict;
}

export const NEXT: Verdict = { kind: 'next' };
export const DONE: Verdict = { kind: 'done' };
export const PASS_THROUGH: Verdict = { kind: 'forward', outcome: 'passthrough' };

export function problem(
  p: ProblemDef,
  detail: string,
  outcome: Outcome,
  opts: { logDetail?: string | null; status?: number; retryAfterS?: number; close?: boolean; retryable?: boolean; extra?: Record<string, unknown> } = {},
): ProblemVerdict {
  return { kind: 'problem', problem: p, detail, outcome, logDetail: opts.logDetail === undefined ? detail : opts.logDetail, ...opts };
}
