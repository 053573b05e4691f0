// The benchmark harness's TLS and HTTP/2 rows (bench/README.md): each product
// row sits between runs of the baseline over its own protocol and its ratio
// is taken against those; h2load gives every connection keys of its own (one
// process per connection: h2load's clients each walk the URI list from the
// top, which would send every new key once per client). The h2load run here
// is real: the bench's HTTP/2 baseline over TLS with the run's kind of
// certificate, in front of an upstream that counts the paths it receives.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createBaseline } from '../../bench/baseline.js';
import { makeCertificate } from '../../bench/lib/certificate.js';
import { H2LOAD_PACKAGE, parseH2loadOutput, runH2load } from '../../bench/lib/h2load.js';
import { parseRunOptions } from '../../bench/lib/options.js';
import { failedPair } from '../../bench/lib/pair.js';
import { makePlan } from '../../bench/lib/plan.js';
import { cpuNsBetween, readCpuNs, readCpuTicks } from '../../bench/lib/proc.js';
import { renderReport } from '../../bench/lib/report.js';
import { summarize, type RunRecord } from '../../bench/lib/summary.js';
import { SCENARIOS } from '../../bench/lib/scenarios.js';
import type { CannonResult } from '../../bench/lib/types.js';
import { onPath } from '../../bench/lib/wrk.js';
import { repoRoot } from '../helpers/repo.js';

const planOf = (only: string | null) => makePlan(parseRunOptions(only === null ? [] : ['--only', only], { BENCH_LOAD: 'autocannon' }));

describe('bench plan: a baseline per protocol', () => {
  test('--only tls: each row between runs of the baseline over its own protocol', () => {
    const plan = planOf('tls');
    assert.deepEqual(plan.steps.map((s) => s.scenario.id), [
      'baseline-tls', 'newkey-tls', 'baseline-tls', 'replay-pg-tls', 'baseline-tls',
      'baseline-h2', 'newkey-h2', 'baseline-h2', 'replay-pg-h2', 'baseline-h2',
    ]);
    assert.deepEqual([...plan.servers].sort(), ['baseline-h2', 'baseline-tls', 'proxy-pg-tls', 'upstream']);
  });

  test('the whole plan keeps the plain rows between plain baselines, and runs the TLS groups after them', () => {
    const ids = planOf(null).steps.map((s) => s.scenario.id);
    assert.deepEqual(ids.slice(0, 3), ['baseline', 'direct', 'baseline']);
    for (const [i, id] of ids.entries()) {
      const own = id.endsWith('-tls') ? 'baseline-tls' : id.endsWith('-h2') ? 'baseline-h2' : id.endsWith('-1c') ? 'baseline-1c' : 'baseline';
      if (id.startsWith('baseline')) continue;
      assert.equal(ids[i - 1], own, `${id} follows ${own}`);
      assert.equal(ids[i + 1], own, `${id} is followed by ${own}`);
    }
  });

  test('a TLS row\'s ratio is against the TLS baseline around it, not the plain one', () => {
    const result = (rps: number): CannonResult => ({
      generator: 'wrk', rps, responses: rps, durationS: 1, latencyMs: { p50: 1, p90: 1, p99: 1, max: 1, mean: 1 },
      status: {}, non2xx: 0, errors: 0, timeouts: 0, upstreamCalls: null, warm: null,
    });
    const run = (scenario: string, seq: number, rps: number): RunRecord => ({ scenario, rep: 1, seq, connections: 50, result: result(rps), error: null });
    const runs = [run('baseline', 0, 10_000), run('baseline-tls', 1, 4_000), run('newkey-tls', 2, 2_000), run('baseline-tls', 3, 6_000)];
    const row = summarize(SCENARIOS.find((s) => s.id === 'newkey-tls')!, runs);
    assert.equal(row.ratio, 0.4);
  });
});

describe('bench plan: the tracing pairs', () => {
  test('--only trace-pair runs both pairs; each can be asked for alone; no load rows come with them', () => {
    assert.deepEqual(planOf('trace-pair').tracePairs, ['trace-pair-newkey', 'trace-pair-replay']);
    assert.deepEqual(planOf('trace-pair-replay').tracePairs, ['trace-pair-replay']);
    assert.deepEqual(planOf('trace-pair-replay').steps, []);
    assert.deepEqual(planOf('tracing').tracePairs, ['trace-pair-newkey', 'trace-pair-replay']);
    assert.deepEqual(planOf('pair').tracePairs, []);
  });

  test('BENCH_TRACE_ENV gives the traced proxy more environment, and a malformed item is refused by name', () => {
    const opts = parseRunOptions([], { BENCH_LOAD: 'autocannon', BENCH_TRACE_ENV: 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE=512, OTEL_TRACES_SAMPLER=always_off' });
    assert.deepEqual(opts.traceEnv, { OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '512', OTEL_TRACES_SAMPLER: 'always_off' });
    assert.throws(() => parseRunOptions([], { BENCH_LOAD: 'autocannon', BENCH_TRACE_ENV: 'batch 512' }), /BENCH_TRACE_ENV: "batch 512" is not NAME=value/);
  });
});

describe('bench plan: the build pairs', () => {
  const withOther = (only: string | null) =>
    makePlan(parseRunOptions(only === null ? [] : ['--only', only], { BENCH_LOAD: 'autocannon', BENCH_OTHER: repoRoot() }));

  test('--only build-pair runs both pairs against BENCH_OTHER\'s build, with no load rows and no tracing pair', () => {
    const plan = withOther('build-pair');
    assert.deepEqual(plan.buildPairs, ['build-pair-newkey', 'build-pair-replay']);
    assert.deepEqual(plan.steps, []);
    assert.deepEqual(plan.tracePairs, []);
    assert.deepEqual(withOther('build-pair-replay').buildPairs, ['build-pair-replay']);
    assert.deepEqual(withOther('trace-pair').buildPairs, []);
  });

  test('asked for without BENCH_OTHER, the run stops and says what to set; a whole run without it has none', () => {
    assert.throws(() => planOf('build-pair-newkey'), /build-pair-newkey: set BENCH_OTHER to the root of another built checkout/);
    assert.deepEqual(planOf(null).buildPairs, []);
    assert.deepEqual(withOther(null).buildPairs, ['build-pair-newkey', 'build-pair-replay']);
  });

  test('BENCH_BUILD_TRACED=1 traces both sides; anything but 1 or 0 is refused by name', () => {
    assert.equal(parseRunOptions([], { BENCH_LOAD: 'autocannon', BENCH_BUILD_TRACED: '1' }).buildTraced, true);
    assert.equal(parseRunOptions([], { BENCH_LOAD: 'autocannon' }).buildTraced, false);
    assert.throws(() => parseRunOptions([], { BENCH_LOAD: 'autocannon', BENCH_BUILD_TRACED: 'yes' }), /BENCH_BUILD_TRACED=yes: expected 1 \(on\) or 0 \(off\)/);
  });

  test('the report names the sides and reads the ratio as this build over BENCH_OTHER\'s, with no target', () => {
    const shape = { id: 'build-pair-replay', labels: ['BENCH_OTHER build', 'this build'] as const, paths: ['/a', '/b'] as const, keys: { kind: 'unique' as const }, title: 'Builds side by side' };
    const text = renderReport({ header: '#', rows: [], skipped: [], memory: {}, rss: [], claim: null, pair: null, tracePairs: [], buildPairs: [failedPair('x', shape)] });
    assert.match(text, /\| round \| BENCH_OTHER build req\/s \| this build req\/s \| this build \/ BENCH_OTHER build req\/s/);
    assert.match(text, /this build's CPU per request — BENCH_OTHER's \(below 1×: this build is the cheaper\)/);
    assert.doesNotMatch(text, /tracing target|1\.053|Not judged/);
    // BENCH_BUILD_TRACED=1: a side that dropped spans did less than the other, and the pair says so.
    const lost = renderReport({ header: '#', rows: [], skipped: [], memory: {}, rss: [], claim: null, pair: null, tracePairs: [], buildPairs: [{ ...failedPair('x', shape), spansLost: 3 }] });
    assert.match(lost, /\*\*Not judged:\*\* a traced side lost at least 3 spans during this pair/);
  });
});

describe('bench pairs: CPU time in nanoseconds', () => {
  test('a process\'s threads\' nanoseconds agree with getrusage and with its clock ticks', () => {
    const before = readCpuNs(process.pid);
    const ticksBefore = readCpuTicks(process.pid)!;
    const usageBefore = process.cpuUsage();
    // Spin until this process has used 300 ms of CPU (not of the wall clock: other tests share the machine).
    let used = 0;
    while (used < 300_000) {
      const u = process.cpuUsage(usageBefore);
      used = u.user + u.system;
    }
    const after = readCpuNs(process.pid);
    const ticks = readCpuTicks(process.pid)! - ticksBefore;
    const u = process.cpuUsage(usageBefore);
    assert.ok(before !== null && after !== null && before.threads.length > 0, 'this process\'s threads were read');
    const ns = cpuNsBetween(before, after);
    assert.ok(ns !== null, `the same threads both times (${before.threads} / ${after.threads})`);
    // getrusage (process.cpuUsage) counts the same run time in microseconds, read a moment apart.
    assert.ok(Math.abs(ns / 1e3 - (u.user + u.system)) <= 20_000, `${ns} ns against ${u.user + u.system} µs of getrusage`);
    // /proc/<pid>/stat's ticks are the same time rounded to 10 ms at each end.
    assert.ok(Math.abs(ns / 1e7 - ticks) <= 3, `${ns} ns against ${ticks} ticks`);
  });

  test('readings of different threads are not compared; a process that is gone reads null', () => {
    assert.equal(cpuNsBetween({ ns: 5e6, threads: '1,2' }, { ns: 9e6, threads: '1,3' }), null);
    assert.equal(cpuNsBetween({ ns: 5e6, threads: '1,2' }, { ns: 9e6, threads: '1,2' }), 4e6);
    assert.equal(readCpuNs(2 ** 22 + 7), null);
  });
});

describe('h2load', () => {
  test('its summary is read', () => {
    const c = parseH2loadOutput([
      'finished in 2.00s, 27307.50 req/s, 827.14KB/s',
      'requests: 54615 total, 54635 started, 54615 done, 54610 succeeded, 5 failed, 2 errored, 1 timeout',
      'status codes: 54610 2xx, 0 3xx, 5 4xx, 0 5xx',
    ].join('\n'));
    assert.deepEqual(c, { durationS: 2, done: 54615, errored: 2, timeout: 1, status: { '2xx': 54610, '4xx': 5 } });
  });

  test('a run that ended just under its second prints milliseconds, and is read as such', () => {
    const c = parseH2loadOutput([
      'finished in 999.00ms, 1548.00 req/s, 68.10KB/s',
      'requests: 1548 total, 1552 started, 1548 done, 1548 succeeded, 0 failed, 0 errored, 0 timeout',
      'status codes: 1548 2xx, 0 3xx, 0 4xx, 0 5xx',
    ].join('\n'));
    assert.equal(c.durationS, 0.999);
    assert.equal(c.done, 1548);
  });

  describe('a real run against the HTTP/2 baseline', () => {
    const paths = new Map<string, number>();
    let upstream: http.Server;
    let origin: string;
    let close: () => Promise<void>;
    let dir: string;
    before(async () => {
      assert.ok(onPath('h2load', process.env), `h2load is not on PATH: apt-get install -y ${H2LOAD_PACKAGE}`);
      upstream = http.createServer((req, res) => {
        paths.set(req.url!, (paths.get(req.url!) ?? 0) + 1);
        req.resume();
        req.on('end', () => res.end('{"ok":true}'));
      });
      await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
      dir = mkdtempSync(join(tmpdir(), 'idem-bench-test-'));
      const cert = makeCertificate(dir);
      const { server, pool } = createBaseline(`http://127.0.0.1:${(upstream.address() as AddressInfo).port}`, 16, {
        tls: { cert: readFileSync(cert.cert), key: readFileSync(cert.key) }, http2: true,
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      origin = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
      close = async () => {
        await pool.close();
        await new Promise((r) => server.close(r));
      };
    });
    after(async () => {
      await close?.();
      upstream?.closeAllConnections();
      await new Promise((r) => upstream?.close(r));
      rmSync(dir, { recursive: true, force: true });
    });

    test('new keys: 3 connections × 4 streams, and no key reaches the upstream twice', async () => {
      paths.clear();
      const run = await runH2load({ origin, path: '/bench/h2/newkey', body: '{}', keys: { kind: 'unique' }, keyPrefix: 'k-', durationS: 1, connections: 3, streams: 4 });
      assert.ok(run.responses > 10, `${run.responses} responses`);
      assert.equal(run.errors, 0);
      assert.deepEqual(Object.keys(run.status), ['2xx'], 'all 2xx'); // h2load also counts statuses of streams finishing after the clock stops
      assert.ok(run.latencyMs.p50 > 0 && run.latencyMs.p99 >= run.latencyMs.p50);
      const twice = [...paths].filter(([, n]) => n > 1);
      assert.deepEqual(twice, [], 'every new key once');
      assert.ok([...paths.keys()].every((p) => /^\/bench\/h2\/newkey\/k-c[012]-\d+$/.test(p)));
    });

    test('replays: only the warmed keys, every one of them', async () => {
      paths.clear();
      await runH2load({ origin, path: '/bench/h2/replay', body: '{}', keys: { kind: 'fixed', count: 20, warmPasses: 1 }, keyPrefix: 'r-', durationS: 1, connections: 2, streams: 2 });
      assert.deepEqual([...paths.keys()].sort(), Array.from({ length: 20 }, (_, i) => `/bench/h2/replay/r-${i}`).sort());
    });
  });
});
