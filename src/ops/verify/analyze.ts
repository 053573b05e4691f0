import { createHash } from 'node:crypto';
import type { Answer, Exchange } from './fire.js';

// `verify`, part 2: how many times did the upstream run? Every request ends
// in one of: an answer from the upstream (an original or a replay), the
// proxy's own refusal (a problem+json it produced: 503, 400, …), a 409 still
// unresolved, or a connection error. Upstream answers are grouped by status
// and body: each distinct (status, body) is one execution. Identical answers
// count once — but several *unmarked* identical answers (no
// Idempotent-Replayed) cannot prove one execution: an endpoint whose answer
// has no unique id looks the same whether it ran once or twenty times.

export type Verdict = 'one' | 'several' | 'ambiguous' | 'inconclusive' | 'unreachable';

export type Fate = 'answer' | 'proxy' | 'conflict' | 'error';

export interface Group {
  /** A, B, C… in order of first appearance. */
  readonly id: string;
  readonly status: number;
  readonly contentType: string | null;
  readonly bytes: number;
  readonly sha256: string;
  readonly sample: string;
  requests: number;
  /** Answers not marked Idempotent-Replayed. */
  originals: number;
  replayed: number;
}

export interface Row {
  readonly n: number;
  readonly exchange: Exchange;
  readonly fate: Fate;
  /** Group id for upstream answers. */
  readonly group: string | null;
}

export interface Analysis {
  readonly verdict: Verdict;
  readonly executions: number;
  readonly exitCode: 0 | 1 | 2;
  readonly rows: readonly Row[];
  readonly groups: readonly Group[];
  readonly counts: {
    readonly originals: number;
    readonly replayedAtOnce: number;
    readonly conflicts: number;
    readonly conflictsThenReplayed: number;
    readonly conflictsUnresolved: number;
    readonly proxyRefused: number;
    readonly errors: number;
  };
  readonly notes: readonly string[];
}

const EXIT: Readonly<Record<Verdict, 0 | 1 | 2>> = { one: 0, several: 1, ambiguous: 1, inconclusive: 2, unreachable: 2 };

function groupId(i: number): string {
  let s = '';
  let n = i;
  do {
    s = String.fromCharCode(65 + (n % 26)) + s;
    n = Math.floor(n / 26) - 1;
  } while (n >= 0);
  return s;
}

function sample(body: Buffer): string {
  const text = body.toString('utf8').replace(/\s+/g, ' ').trim();
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

function fateOf(a: Exchange['final']): Fate {
  if (a.kind === 'error') return 'error';
  if (a.status === 409) return 'conflict';
  // The proxy's own answers are not executions — except a stored upstream
  // failure (502/504 bound to the key), which replays like any answer.
  if (a.problemType !== null && !a.replayed && !/upstream-(timeout|reset)$/.test(a.problemType)) return 'proxy';
  return 'answer';
}

export function analyze(exchanges: readonly Exchange[]): Analysis {
  const groups = new Map<string, Group>();
  const rows: Row[] = exchanges.map((exchange, i) => {
    const fate = fateOf(exchange.final);
    if (fate !== 'answer') return { n: i + 1, exchange, fate, group: null };
    const a = exchange.final as Answer;
    const sha256 = createHash('sha256').update(a.body).digest('hex');
    const k = `${a.status} ${sha256}`;
    let g = groups.get(k);
    if (g === undefined) {
      g = { id: groupId(groups.size), status: a.status, contentType: a.contentType, bytes: a.body.length, sha256, sample: sample(a.body), requests: 0, originals: 0, replayed: 0 };
      groups.set(k, g);
    }
    g.requests++;
    if (a.replayed) g.replayed++;
    else g.originals++;
    return { n: i + 1, exchange, fate, group: g.id };
  });

  const isConflict = (e: Exchange): boolean => e.first.kind === 'answer' && e.first.status === 409;
  const counts = {
    originals: [...groups.values()].reduce((s, g) => s + g.originals, 0),
    replayedAtOnce: rows.filter((r) => r.fate === 'answer' && !isConflict(r.exchange) && (r.exchange.final as Answer).replayed).length,
    conflicts: exchanges.filter(isConflict).length,
    conflictsThenReplayed: rows.filter((r) => isConflict(r.exchange) && r.fate === 'answer').length,
    conflictsUnresolved: rows.filter((r) => r.fate === 'conflict').length,
    proxyRefused: rows.filter((r) => r.fate === 'proxy').length,
    errors: rows.filter((r) => r.fate === 'error').length,
  };

  const list = [...groups.values()];
  const executions = list.length;
  const notes: string[] = [];
  let verdict: Verdict;
  if (counts.errors === exchanges.length) verdict = 'unreachable';
  else if (executions === 0) verdict = 'inconclusive';
  else if (executions > 1) verdict = 'several';
  else if (list[0]!.originals > 1) verdict = 'ambiguous';
  else verdict = 'one';

  if (verdict === 'ambiguous') {
    notes.push(`${list[0]!.originals} identical answers were not marked Idempotent-Replayed: if this endpoint's answer carries no unique id (e.g. the id of what it created), one execution and ${list[0]!.originals} look the same. Point verify at an endpoint that answers with a unique id.`);
  }
  if (verdict === 'inconclusive') notes.push('no request got an answer from the upstream (only the proxy\'s own refusals, 409s or errors): nothing to compare.');
  if (executions >= 1 && list.every((g) => g.status < 200 || g.status > 299)) {
    notes.push(`the upstream never answered 2xx (${list.map((g) => g.status).join(', ')}): check --url, --method, --data and --header.`);
  }
  if (counts.conflictsUnresolved > 0) notes.push(`${counts.conflictsUnresolved} request(s) still got 409 after every retry: the first request outlived the retries (raise --retries or --max-retry-wait).`);
  if (counts.proxyRefused > 0) notes.push(`${counts.proxyRefused} request(s) were refused by the proxy itself (see their status; e.g. 503 when the key store is unreachable).`);
  if (counts.errors > 0 && verdict !== 'unreachable') notes.push(`${counts.errors} request(s) failed without an answer (connection error or --timeout).`);
  return { verdict, executions, exitCode: EXIT[verdict], rows, groups: list, counts, notes };
}
