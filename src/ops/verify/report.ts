import type { Analysis, Row } from './analyze.js';
import type { Attempt } from './fire.js';

// `verify`, part 3: the report, as a table for people or JSON for scripts.

export interface ReportHead {
  readonly url: string;
  readonly method: string;
  readonly keyHeader: string;
  readonly key: string;
  readonly concurrency: number;
}

const MAX_ROWS = 100;

const ms = (v: number): string => `${Math.round(v)} ms`;

function attemptText(a: Attempt): string {
  if (a.kind === 'error') return `error ${a.code ?? a.message}`;
  const parts = [String(a.status)];
  if (a.replayed) parts.push('replayed');
  if (a.status === 409 && a.retryAfterS !== null) parts.push(`Retry-After ${a.retryAfterS}s`);
  if (a.problemType !== null && a.status !== 409) parts.push(a.problemType.slice(a.problemType.lastIndexOf(':') + 1));
  return `${parts.join(' ')} in ${ms(a.ms)}`;
}

function rowText(r: Row): [string, string, string, string] {
  const e = r.exchange;
  const then = e.retries === 0 ? '' : `${attemptText(e.final)} (${e.retries} ${e.retries === 1 ? 'retry' : 'retries'})`;
  const label = r.group ?? (r.fate === 'proxy' ? 'refused by proxy' : r.fate === 'conflict' ? 'still 409' : 'no answer');
  return [String(r.n), attemptText(e.first), then, label];
}

function table(rows: readonly (readonly string[])[], indent = '  '): string[] {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => `${indent}${r.map((c, i) => c.padEnd(widths[i]!)).join('   ')}`.trimEnd());
}

const HEADLINE: Readonly<Record<Analysis['verdict'], (a: Analysis) => string>> = {
  one: () => 'PASS: exactly one execution',
  several: (a) => `FAIL: the upstream executed ${a.executions} times (${a.executions} different answers)`,
  ambiguous: () => 'FAIL: cannot tell one execution from several (identical answers, none marked as a replay)',
  inconclusive: () => 'INCONCLUSIVE: no answer from the upstream to compare',
  unreachable: () => 'ERROR: no request got an answer',
};

export function formatText(head: ReportHead, a: Analysis): string {
  const lines: string[] = [];
  lines.push(`verify: ${head.concurrency} identical ${head.method} requests at once to ${head.url}`);
  lines.push(`  ${head.keyHeader}: ${head.key}`);
  lines.push('');
  const shown = a.rows.slice(0, MAX_ROWS).map(rowText);
  lines.push(...table([['#', 'first answer', 'after Retry-After', 'answer'], ...shown]));
  if (a.rows.length > MAX_ROWS) lines.push(`  ... ${a.rows.length - MAX_ROWS} more (--json lists every request)`);
  lines.push('');
  if (a.groups.length > 0) {
    lines.push('answers from the upstream (same status and body = same execution):');
    lines.push(...table(a.groups.map((g) => [
      g.id, String(g.status), g.contentType ?? '-', `${g.bytes} bytes`,
      `${g.requests} request(s): ${g.originals} original, ${g.replayed} replayed`, g.sample,
    ])));
    lines.push('');
  }
  const c = a.counts;
  lines.push(`${HEADLINE[a.verdict](a)}`);
  lines.push(`  executions: ${a.executions}; original answers: ${c.originals}; replayed at once: ${c.replayedAtOnce}; ` +
    `409 then replayed: ${c.conflictsThenReplayed} of ${c.conflicts}; refused by the proxy: ${c.proxyRefused}; errors: ${c.errors}`);
  for (const n of a.notes) lines.push(`  note: ${n}`);
  return `${lines.join('\n')}\n`;
}

function attemptJson(a: Attempt): Record<string, unknown> {
  if (a.kind === 'error') return { error: a.message, code: a.code, ms: Math.round(a.ms) };
  return {
    status: a.status,
    replayed: a.replayed,
    retryAfter: a.retryAfterS,
    problemType: a.problemType,
    contentType: a.contentType,
    bytes: a.body.length,
    ms: Math.round(a.ms),
  };
}

export function formatJson(head: ReportHead, a: Analysis): string {
  return `${JSON.stringify({
    ...head,
    verdict: a.verdict,
    executions: a.executions,
    exitCode: a.exitCode,
    counts: a.counts,
    answers: a.groups,
    requests: a.rows.map((r) => ({
      n: r.n,
      first: attemptJson(r.exchange.first),
      final: attemptJson(r.exchange.final),
      retries: r.exchange.retries,
      fate: r.fate,
      answer: r.group,
    })),
    notes: a.notes,
  }, null, 2)}\n`;
}
