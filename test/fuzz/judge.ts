import { CUT_MID_BODY, UNKNOWN_OUTCOME, hash, type Execution } from './upstream.js';
import type { Mode, Outcome } from './clients.js';

// The oracle. For one key: the upstream's executions (the truth) against
// every answer its clients got. What it holds the proxy to (docs/contract.md):
//  - at most once: a key runs again only after an answer that released it
//    (a `releaseOn` status); never after an answer it stored, nor after an
//    unknown outcome;
//  - a replay is the stored answer byte for byte, and there is one to replay;
//  - an upstream answer relayed fresh is the one the upstream gave, and a
//    response the upstream broke off never reaches a client as a whole one;
//  - the proxy's own answers are the ones its rules allow: 409 while the key
//    is in flight or its outcome is unknown, the mismatch answer only when
//    some claim carried the other payload, 502/504 only after an unknown
//    outcome.

export interface Heard {
  readonly mode: Mode;
  readonly outcome: Outcome;
}

export interface Rules {
  /** The statuses that release a key (the route's `releaseOn`). */
  releases(status: number): boolean;
}

type Kind = 'in-flight' | 'outcome-unknown' | 'mismatch' | 'other';

/** What a proxy-made answer is, in any of the dialects (problem+json, Stripe, ACP). */
function kindOf(text: string): Kind {
  if (/in-flight|idempotency_key_in_use|idempotency_in_flight/.test(text)) return 'in-flight';
  if (/outcome.unknown/.test(text)) return 'outcome-unknown';
  if (/key-mismatch|idempotency_error|idempotency_conflict/.test(text)) return 'mismatch';
  return 'other';
}

const header = (h: Record<string, string | string[] | undefined>, name: string): string | undefined => {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
};

/** `passthrough`: the route forwards every request as it comes; only what a relay promises is checked. */
export function judge(slot: string, executions: readonly Execution[], heard: readonly Heard[], rules: Rules, passthrough = false): string[] {
  const findings: string[] = [];
  const say = (what: string): void => { findings.push(`${slot}: ${what}`); };
  const unknown = executions.some((e) => UNKNOWN_OUTCOME.has(e.behaviour));
  const cut = executions.some((e) => CUT_MID_BODY.has(e.behaviour));
  executions.forEach((e, i) => {
    if (!passthrough && i < executions.length - 1 && !rules.releases(e.status)) {
      say(`execution ${e.id} (${e.behaviour}, status ${e.status || 'unknown'}) was followed by another: ${executions.length} executions`);
    }
  });
  const stored = executions.filter((e) => !UNKNOWN_OUTCOME.has(e.behaviour) && !rules.releases(e.status)).at(-1);
  for (const { mode, outcome } of heard) {
    if ('gone' in outcome) continue;
    if ('error' in outcome) {
      const code = outcome.error.code ?? '';
      // A response the upstream broke off is cut: the client's error is the right answer.
      if (cut && /^(UND_ERR_SOCKET|ECONNRESET|ERR_HTTP2_STREAM_ERROR|ERR_HTTP2_SESSION_ERROR|HEAD_INCOMPLETE|SHORT_BODY)$/.test(code)) continue;
      say(`${mode}: client error ${code} ${outcome.error.message}`);
      continue;
    }
    const a = outcome.answer;
    const replayed = header(a.headers, 'idempotent-replayed') === 'true';
    const text = a.body.toString();
    const executionId = header(a.headers, 'x-fuzz-execution');
    if (replayed && passthrough) {
      say(`${mode}: a replay on a pass-through route`);
      continue;
    }
    if (replayed && unknown && (a.status === 502 || a.status === 504)) continue; // the stored unknown outcome
    if (replayed) {
      if (stored === undefined) say(`${mode}: replayed ${a.status} with no stored execution to replay`);
      else if (a.status !== stored.status || hash(a.body) !== stored.bodyHash) {
        say(`${mode}: replayed ${a.status} (${text.slice(0, 60)}) is not execution ${stored.id}'s ${stored.status}`);
      }
      continue;
    }
    if (executionId !== undefined) {
      const e = executions.find((x) => String(x.id) === executionId);
      if (e === undefined) say(`${mode}: an answer from execution ${executionId}, which is not this key's`);
      else if (CUT_MID_BODY.has(e.behaviour)) say(`${mode}: execution ${e.id}'s body was broken off, yet the client got a whole ${a.status} (${a.body.length} bytes)`);
      else if (a.status !== e.status || hash(a.body) !== e.bodyHash) say(`${mode}: the fresh answer is not what execution ${e.id} sent`);
      continue;
    }
    if (passthrough) {
      if (!((a.status === 502 || a.status === 504) && unknown)) say(`${mode}: the proxy's own ${a.status} on a pass-through route (${text.slice(0, 160)})`);
      continue;
    }
    const kind = kindOf(text);
    if (a.status === 409 && kind === 'in-flight') continue;
    if (a.status === 409 && kind === 'outcome-unknown') {
      if (!unknown) say(`${mode}: outcome-unknown, but no execution's outcome was unknown`);
      continue;
    }
    if ((a.status === 400 || a.status === 422) && kind === 'mismatch') {
      // Some claim of the key, then or later (a released key is claimed again), carried the other payload.
      const mine = mode === 'other-payload';
      if (!executions.some((e) => e.other !== mine)) say(`${mode}: a mismatch answer, but every claim of the key carried this payload`);
      continue;
    }
    if ((a.status === 502 || a.status === 504) && unknown) continue;
    say(`${mode}: unexpected ${a.status} ${text.slice(0, 160)}`);
  }
  return findings;
}
