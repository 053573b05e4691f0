import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/log/logger.js';
import { PROBLEM_BASE } from '../../src/http/problems.js';
import type { Reply } from '../helpers/http.js';
import type { RawReply } from '../helpers/raw-http.js';
import { waitFor } from '../helpers/wait.js';

// Small tools shared by the core tests: problem+json assertions, a log
// capture, unique keys. The raw HTTP client, polling and temp dirs are in
// test/helpers/.

/** Asserts an RFC 9457 problem answer with the given slug and status. */
export function assertProblem(r: Reply | RawReply, slug: string, status: number): any {
  assert.equal(r.status, status, `status of ${r.body.toString()}`);
  const ct = 'header' in r ? r.header('content-type') : r.headers['content-type'];
  assert.equal(ct, 'application/problem+json');
  const p = JSON.parse(r.body.toString());
  assert.equal(p.type, PROBLEM_BASE + slug);
  assert.equal(p.status, status);
  assert.equal(typeof p.title, 'string');
  assert.ok(p.title.length > 0);
  assert.equal(typeof p.detail, 'string');
  assert.ok(p.detail.length > 0);
  assert.equal(typeof p.requestId, 'string');
  assert.ok(p.requestId.length > 0);
  return p;
}

export function header(r: Reply, name: string): string | undefined {
  const v = r.headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

/** A pino logger whose lines the test can read. */
export function captureLogger(level = 'info'): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  let buf = '';
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      buf += chunk.toString();
      let i;
      while ((i = buf.indexOf('\n')) !== -1) {
        lines.push(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
      cb();
    },
  });
  return { logger: createLogger(level, sink), lines };
}

/** Waits for the request line (`"msg":"request"`) of `path` among captured log lines. */
export function requestLine(lines: readonly string[], path: string): Promise<Record<string, unknown>> {
  return waitFor(`the request line of ${path}`, () => {
    for (const l of lines) {
      const j = JSON.parse(l) as Record<string, unknown>;
      if (j.msg === 'request' && j.path === path) return j;
    }
    return undefined;
  });
}

/** A unique key per test run. */
export function uniqueKey(label: string): string {
  return `${label}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

/** The sha256 of `chunk` repeated `times` times. */
export function repeatedSha256(chunk: Buffer, times: number): string {
  const h = createHash('sha256');
  for (let i = 0; i < times; i++) h.update(chunk);
  return h.digest('hex');
}
