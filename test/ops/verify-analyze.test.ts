// The verdict of `verify`, from what each request got (no I/O).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { analyze } from '../../src/ops/verify/analyze.js';
import { retryAfterSeconds, type Answer, type Attempt, type Exchange } from '../../src/ops/verify/fire.js';

const answer = (status: number, body: string, extra: Partial<Answer> = {}): Answer => ({
  kind: 'answer', status, body: Buffer.from(body), replayed: false, retryAfterS: null,
  contentType: 'application/json', problemType: null, ms: 1, ...extra,
});
const conflict = answer(409, '{"type":"urn:idempotency-proxy:problem:in-flight"}', { retryAfterS: 1, problemType: 'urn:idempotency-proxy:problem:in-flight' });
const ex = (first: Attempt, final: Attempt = first, retries = first === final ? 0 : 1): Exchange => ({ first, final, retries });
const refused: Attempt = { kind: 'error', code: 'ECONNREFUSED', message: 'connect ECONNREFUSED', ms: 1 };

test('one original and replays (at once or after a 409) are one execution', () => {
  const a = analyze([
    ex(answer(201, '{"id":1}')),
    ex(answer(201, '{"id":1}', { replayed: true })),
    ex(conflict, answer(201, '{"id":1}', { replayed: true })),
  ]);
  assert.equal(a.verdict, 'one');
  assert.equal(a.exitCode, 0);
  assert.equal(a.executions, 1);
  assert.deepEqual(a.groups.map((g) => [g.id, g.requests, g.originals, g.replayed]), [['A', 3, 1, 2]]);
  assert.equal(a.counts.replayedAtOnce, 1);
  assert.equal(a.counts.conflictsThenReplayed, 1);
});

test('different bodies or statuses are several executions', () => {
  const a = analyze([ex(answer(201, '{"id":1}')), ex(answer(201, '{"id":2}')), ex(answer(500, '{"id":1}'))]);
  assert.equal(a.verdict, 'several');
  assert.equal(a.exitCode, 1);
  assert.equal(a.executions, 3);
  assert.deepEqual(a.rows.map((r) => r.group), ['A', 'B', 'C']);
});

test('a replay that differs from the original is a second execution', () => {
  const a = analyze([ex(answer(201, '{"id":1}')), ex(conflict, answer(201, '{"id":2}', { replayed: true }))]);
  assert.equal(a.verdict, 'several');
});

test('identical unmarked answers are ambiguous, not a pass', () => {
  const a = analyze([ex(answer(200, '{"ok":true}')), ex(answer(200, '{"ok":true}'))]);
  assert.equal(a.verdict, 'ambiguous');
  assert.equal(a.exitCode, 1);
  assert.match(a.notes[0]!, /unique id/);
});

test("the proxy's own refusals are not executions; a stored upstream timeout is", () => {
  const unavailable = answer(503, '{}', { problemType: 'urn:idempotency-proxy:problem:store-unavailable' });
  const a = analyze([ex(unavailable), ex(unavailable)]);
  assert.equal(a.verdict, 'inconclusive');
  assert.equal(a.exitCode, 2);
  assert.equal(a.counts.proxyRefused, 2);
  const timeout = answer(504, '{"t":1}', { problemType: 'urn:idempotency-proxy:problem:upstream-timeout' });
  const b = analyze([ex(timeout), ex(conflict, answer(504, '{"t":1}', { replayed: true, problemType: timeout.problemType }))]);
  assert.equal(b.verdict, 'one');
  assert.match(b.notes.join(' '), /never answered 2xx/);
});

test('unresolved 409s and errors are reported beside the verdict; all errors: unreachable', () => {
  const a = analyze([ex(answer(201, '{"id":1}')), ex(conflict, conflict, 5), ex(refused)]);
  assert.equal(a.verdict, 'one');
  assert.equal(a.counts.conflictsUnresolved, 1);
  assert.equal(a.counts.errors, 1);
  assert.equal(a.notes.length, 2);
  assert.equal(analyze([ex(refused), ex(refused)]).verdict, 'unreachable');
});

test('Retry-After: seconds or an HTTP date', () => {
  assert.equal(retryAfterSeconds('3'), 3);
  const now = Date.parse('2026-01-01T00:00:00.000Z');
  assert.equal(retryAfterSeconds(new Date(now + 4000).toUTCString(), now), 4);
  assert.equal(retryAfterSeconds(new Date(now - 4000).toUTCString(), now), 0);
  assert.equal(retryAfterSeconds('soon'), null);
  assert.equal(retryAfterSeconds(null), null);
});
