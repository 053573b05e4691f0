import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spansLostSince } from '../../bench/lib/lost-spans.js';
import { failedPair } from '../../bench/lib/pair.js';
import { renderReport } from '../../bench/lib/report.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { metric, metricsText } from '../helpers/metrics.js';
import { startReceiver, type Receiver } from '../helpers/otlp.js';
import { spawnProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { tempDir } from '../helpers/tmp.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';

// docs/operations.md, Tracing: spans the proxy drops — a full queue, an export
// the collector did not take — are counted by cause in
// idempotency_proxy_tracing_spans_lost_total and logged; requests never wait.
// The proxy runs as a child process: the OTEL_BSP_* variables are read from
// its own environment.

const LOST = 'idempotency_proxy_tracing_spans_lost_total';
/** The start-up warning (src/app.ts) for a queue with room for less than two batches. */
const SMALL_QUEUE = 'tracing: OTEL_BSP_MAX_QUEUE_SIZE holds less than two export batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE): spans recorded while a batch is sent are dropped; make the queue at least twice the batch';

const logged = (proxy: SpawnedProxy, msg: string): Array<Record<string, unknown>> =>
  proxy.lines.flatMap((l) => {
    try {
      const j = JSON.parse(l) as Record<string, unknown>;
      return j['msg'] === msg ? [j] : [];
    } catch {
      return [];
    }
  });

describe('tracing: lost spans are counted by cause', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let slow: Receiver;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201, 20));
    slow = await startReceiver({ delayMs: 3000 });
  });
  after(async () => {
    await upstream.close();
    await slow.close();
    await db.drop();
  });

  const serve = (env: NodeJS.ProcessEnv): Promise<SpawnedProxy> =>
    spawnProxy(['serve', '--upstream', upstream.url, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', '--database-url', db.url], env);

  test('a queue with room for one batch: warned about at start, and the spans recorded while that batch is sent are counted as queue_full', async () => {
    const proxy = await serve({ OTEL_EXPORTER_OTLP_ENDPOINT: slow.url, OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '4', OTEL_BSP_MAX_QUEUE_SIZE: '4' });
    try {
      assert.equal(logged(proxy, SMALL_QUEUE).length, 1,
        `the start-up warning: ${proxy.lines.join('\n')}`);
      // Ten executions at once, four spans each (server, claim, upstream, commit): the first four fill the
      // only batch the queue has room for, which the collector holds for 3 s; the other 36 are dropped.
      const prefix = `lost-${Date.now()}`;
      const answers = await Promise.all(Array.from({ length: 10 }, (_, i) =>
        send(`${proxy.url}/orders`, { headers: { 'idempotency-key': `${prefix}-${i}`, 'content-type': 'application/json' }, body: '{"amount":1}' })));
      assert.deepEqual(answers.map((r) => r.status), Array(10).fill(201), 'no request waits for the collector or fails for it');
      const text = await metricsText(proxy.adminUrl);
      assert.equal(metric(text, LOST, { cause: 'queue_full' }), 36, text.split('\n').filter((l) => l.startsWith(LOST)).join('\n'));
      assert.equal(metric(text, LOST, { cause: 'export_failed' }), 0);
      // The log line arrives through the child's stdout, a moment after the metric.
      for (let i = 0; i < 50 && logged(proxy, 'tracing: spans lost').length === 0; i++) await new Promise((r) => setTimeout(r, 100));
      const warned = logged(proxy, 'tracing: spans lost');
      assert.ok(warned.length >= 1 && warned[0]!['reason'] === 'the span queue is full', JSON.stringify(warned));

      // The benchmark's tracing pairs read the same log (bench/lib/lost-spans.ts) and do not judge a pair that lost spans.
      const dir = tempDir('idem-lost-');
      const log = dir.write('proxy-trace-on.log', `${proxy.lines.join('\n')}\n`);
      const read = spansLostSince(log, 0);
      assert.ok(read !== null && read >= 1 && read <= 36, `the log says at least one of the 36 lost: ${read}`);
      const shape = { id: 'trace-pair-replay', labels: ['tracing off', 'tracing on'] as const, paths: ['/a', '/b'] as const, keys: { kind: 'unique' as const }, title: 'Tracing side by side' };
      const report = (spansLost: number) => renderReport({ header: '#', rows: [], skipped: [], memory: {}, rss: [], claim: null, pair: null, tracePairs: [{ ...failedPair('x', shape), spansLost }], buildPairs: [] });
      assert.match(report(read!), new RegExp(`Not judged:\\*\\* the traced proxy lost at least ${read} spans`));
      assert.doesNotMatch(report(0), /Not judged/);
      dir.remove();
    } finally {
      await proxy.stop();
    }
  });

  test('a collector that refuses the connection: the batch is counted as export_failed', async () => {
    const proxy = await serve({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_BSP_SCHEDULE_DELAY: '50', OTEL_EXPORTER_OTLP_TIMEOUT: '1000' });
    try {
      assert.equal(logged(proxy, SMALL_QUEUE).length, 0,
        'the default queue holds four batches');
      const r = await send(`${proxy.url}/orders`, { headers: { 'idempotency-key': `refused-${Date.now()}`, 'content-type': 'application/json' }, body: '{}' });
      assert.equal(r.status, 201);
      let failed = 0;
      const end = Date.now() + 15_000;
      while (failed < 4 && Date.now() < end) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        failed = metric(await metricsText(proxy.adminUrl), LOST, { cause: 'export_failed' });
      }
      assert.equal(failed, 4, 'the execution\'s four spans, counted once the export failed');
      assert.equal(metric(await metricsText(proxy.adminUrl), LOST, { cause: 'queue_full' }), 0);
    } finally {
      await proxy.stop();
    }
  });
});
