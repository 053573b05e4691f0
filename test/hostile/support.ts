import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { PROBLEM_BASE } from '../../src/http/problems.js';
import { createTestDatabase, rowCount, type TestDatabase } from '../helpers/db.js';
import { answer, startControlledUpstream, type ControlledUpstream } from '../faults/helpers/controlled-upstream.js';
import { startTestProxy } from '../helpers/proxy.js';
import { rawCollect, type RawReply } from '../helpers/raw-http.js';

// The hostile-input bench: a proxy on a fresh database in front of an
// upstream that records everything it receives. Every hostile case must get
// a precise error and leave both the store and the upstream untouched.

export const HOSTILE_YAML = `
upstream: { timeout: 5s }
defaults:
  tenant: { constant: t }
  maxBodyBytes: 1KiB
routes:
  - name: pay
    match: { path: "/pay/**" }
    required: true
  - name: hooks
    match: { path: "/hooks/**" }
    key: { fromBody: /event/id }
  - name: canonical
    match: { path: "/canonical/**" }
    maxBodyBytes: 1MiB
    fingerprint: { json: canonical }
  - name: bighooks
    match: { path: "/bighooks/**" }
    maxBodyBytes: 1MiB
    key: { fromBody: /event/id }
  - name: open
    match: { path: "/**" }
    mode: passthrough
`;

export interface Bench {
  readonly db: TestDatabase;
  readonly up: ControlledUpstream;
  readonly proxy: RunningProxy;
  close(): Promise<void>;
}

export async function startBench(): Promise<Bench> {
  const db = await createTestDatabase();
  const up = await startControlledUpstream(answer());
  const proxy = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: HOSTILE_YAML });
  return {
    db, up, proxy,
    async close() {
      await proxy.close();
      await up.close();
      await db.drop();
    },
  };
}

export interface Expect {
  readonly status: number;
  /** Problem slug, e.g. 'key-malformed'. */
  readonly type: string;
  /** Must appear in the problem's detail (case-insensitive). */
  readonly detail?: RegExp;
}

/**
 * Sends raw bytes; asserts the precise error, exactly one response on the
 * connection (nothing smuggled behind it), and that neither the store nor
 * the upstream saw anything.
 */
export async function expectRejected(b: Bench, bytes: string | Buffer, want: Expect, what: string): Promise<RawReply> {
  const rows = await rowCount(b.db.url);
  const seen = b.up.exchanges.length;
  const reply = await rawCollect(b.proxy.url, bytes, 3000);
  assert.equal(reply.status, want.status, `${what}: status (got ${reply.raw.toString('latin1').slice(0, 200)})`);
  assert.equal(reply.header('content-type'), 'application/problem+json', `${what}: problem+json`);
  const problem = reply.json() as { type: string; detail: string; status: number };
  assert.equal(problem.type, PROBLEM_BASE + want.type, `${what}: problem type (detail: ${problem.detail})`);
  assert.equal(problem.status, want.status);
  if (want.detail !== undefined) assert.match(problem.detail, want.detail, `${what}: detail`);
  assert.equal(reply.raw.toString('latin1').match(/HTTP\/1\.[01] \d{3} /g)?.length, 1, `${what}: exactly one response on the connection`);
  assert.equal(b.up.exchanges.length, seen, `${what}: the upstream must see nothing`);
  assert.equal(await rowCount(b.db.url), rows, `${what}: the store must be unchanged`);
  return reply;
}
