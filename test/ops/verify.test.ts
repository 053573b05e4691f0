// `idempotency-proxy verify`: through the proxy it sees exactly one execution
// (exit 0); against the bare upstream it sees the duplicates (exit 1); an
// endpoint whose identical answers prove nothing is not a pass.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { runCli, startTestProxy } from '../helpers/proxy.js';
import { cliInProcess } from './support.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';

const YAML = `
routes:
  - name: pay
    match: { path: /pay/** }
    tenant: { constant: t }
    lease: 1s
  - name: wait
    match: { path: /wait/** }
    tenant: { constant: t }
    onInFlight: wait
    lease: 3s
    waitTimeout: 3s
`;

interface Report {
  verdict: string;
  executions: number;
  exitCode: number;
  key: string;
  counts: Record<string, number>;
  answers: Array<{ id: string; status: number; requests: number; originals: number; replayed: number }>;
  requests: Array<{ first: { status?: number }; final: { status?: number; replayed?: boolean }; answer: string | null }>;
}

let db: TestDatabase;
let upstream: TestUpstream;
let proxy: RunningProxy;

before(async () => {
  db = await createTestDatabase();
  // ?delay=ms makes the first request last long enough for every duplicate to
  // arrive while it runs, even on a loaded machine.
  upstream = await startUpstream(async (req, n, res) => {
    const delay = Number(/delay=(\d+)/.exec(req.url)?.[1] ?? 300);
    return jsonResponder(201, delay)(req, n, res);
  });
  proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML });
});
after(async () => {
  await proxy?.close();
  await upstream?.close();
  await db?.drop();
});

async function verify(args: string[]): Promise<{ code: number | null; report: Report; stderr: string }> {
  const r = await cliInProcess(['verify', '--json', ...args]);
  let report: Report;
  try {
    report = JSON.parse(r.stdout) as Report;
  } catch {
    throw new Error(`verify printed no JSON (exit ${r.code}):\n${r.stdout}\n${r.stderr}`);
  }
  return { code: r.code, report, stderr: r.stderr };
}

describe('verify', () => {
  test('through the proxy: exactly one execution, the 409s then get the replay (exit 0)', async () => {
    const before = upstream.executions();
    const { code, report } = await verify(['--url', `${proxy.url}/pay/orders?delay=1000`, '-n', '10', '-d', '{"amount":100}']);
    assert.equal(code, 0, JSON.stringify(report, null, 2));
    assert.equal(report.verdict, 'one');
    assert.equal(report.executions, 1);
    assert.equal(upstream.executions() - before, 1, 'the upstream really ran once');
    assert.equal(report.requests.length, 10);
    assert.equal(report.counts.originals, 1);
    assert.equal(report.counts.conflicts, 9, 'the duplicates got 409 while the first ran');
    assert.equal(report.counts.conflictsThenReplayed, 9, 'and the stored answer after Retry-After');
    assert.ok(report.requests.every((r) => r.answer === 'A' && r.final.status === 201));
    const sent = upstream.received.at(-1)!;
    assert.equal(sent.headers['idempotency-key'], report.key, 'one fresh key, sent as Idempotency-Key');
    assert.equal(sent.headers['content-type'], 'application/json');
    assert.equal(sent.body.toString(), '{"amount":100}');
  });

  test('through an onInFlight: wait route: the duplicates are replayed at once (exit 0)', async () => {
    const { code, report } = await verify(['--url', `${proxy.url}/wait/orders`, '-n', '8']);
    assert.equal(code, 0, JSON.stringify(report, null, 2));
    assert.equal(report.executions, 1);
    assert.equal(report.counts.replayedAtOnce, 7);
  });

  test('against the bare upstream: every request executed (exit 1)', async () => {
    const before = upstream.executions();
    const { code, report } = await verify(['--url', `${upstream.url}/pay/orders`, '-n', '6']);
    assert.equal(code, 1);
    assert.equal(report.verdict, 'several');
    assert.equal(report.executions, 6);
    assert.equal(upstream.executions() - before, 6);
    assert.equal(report.answers.length, 6);
  });

  test('identical answers that are not marked as replays prove nothing (exit 1)', async () => {
    const constant = await startUpstream((_req, _n, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    });
    try {
      const { code, report } = await verify(['--url', `${constant.url}/x`, '-n', '4']);
      assert.equal(code, 1);
      assert.equal(report.verdict, 'ambiguous');
      assert.equal(constant.executions(), 4);
    } finally {
      await constant.close();
    }
  });

  test('the human report shows what each request got (the real binary)', async () => {
    const r = await runCli(['verify', '--url', `${proxy.url}/pay/h?delay=1000`, '-n', '3', '-H', 'X-Trace: {{key}}', '--max-retry-wait', '3s']);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /verify: 3 identical POST requests at once/);
    assert.match(r.stdout, /Idempotency-Key: [0-9a-f-]{36}/);
    assert.match(r.stdout, /#\s+first answer\s+after Retry-After\s+answer/);
    assert.match(r.stdout, /409 Retry-After \ds in \d+ ms\s+201 replayed in \d+ ms \(\d+ retr(y|ies)\)\s+A/);
    assert.match(r.stdout, /PASS: exactly one execution/);
    const key = /Idempotency-Key: (\S+)/.exec(r.stdout)![1];
    assert.equal(upstream.received.at(-1)!.headers['x-trace'], key, '{{key}} in a header is the fresh key');
  });
});
