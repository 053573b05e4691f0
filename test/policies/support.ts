import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { PROBLEM_BASE } from '../../src/http/problems.js';
import type { Reply } from '../helpers/http.js';

// Small helpers for the policy tests: problem bodies, hashes, peak RSS. The
// logged proxy, metrics, temp dirs and polling are in test/helpers/.

/** The problem type slug of a problem+json reply. */
export function problemType(r: Reply): string {
  assertProblem(r);
  return String(r.json().type).replace(PROBLEM_BASE, '');
}

function assertProblem(r: Reply): void {
  const ct = String(r.headers['content-type'] ?? '');
  if (!ct.startsWith('application/problem+json')) {
    throw new Error(`expected a problem+json reply, got ${r.status} ${ct}: ${r.text().slice(0, 300)}`);
  }
}

export function sha256(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

/** Peak resident set size (VmHWM) of a process, in bytes. Linux only. */
export function peakRss(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /^VmHWM:\s+(\d+) kB/m.exec(status);
  if (m === null) throw new Error(`no VmHWM in /proc/${pid}/status`);
  return Number(m[1]) * 1024;
}
