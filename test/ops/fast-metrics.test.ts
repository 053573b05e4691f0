import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Counter, Histogram, Registry } from 'prom-client';
import { FastCounter, FastHistogram } from '../../src/metrics/fast.js';

// /metrics is scraped by Prometheus and read by the dashboards in
// deploy/grafana: the light counters and histograms of src/metrics/fast.ts
// must expose exactly what prom-client's own classes expose for the same
// observations (cumulative buckets, +Inf, _sum, _count, label order).

const BUCKETS = [0.001, 0.01, 0.1, 1];

test('counters and histograms expose the same text as prom-client for the same observations', async () => {
  const ours = new Registry();
  const theirs = new Registry();
  const c1 = new FastCounter({ name: 'x_requests_total', help: 'Requests', labelNames: ['route', 'outcome'], registers: [ours] });
  const c2 = new Counter({ name: 'x_requests_total', help: 'Requests', labelNames: ['route', 'outcome'], registers: [theirs] });
  const h1 = new FastHistogram({ name: 'x_seconds', help: 'Durations', labelNames: ['op'], buckets: BUCKETS, registers: [ours] });
  const h2 = new Histogram({ name: 'x_seconds', help: 'Durations', labelNames: ['op'], buckets: BUCKETS, registers: [theirs] });
  const u1 = new FastCounter({ name: 'x_deleted_total', help: 'Deleted', registers: [ours] });
  const u2 = new Counter({ name: 'x_deleted_total', help: 'Deleted', registers: [theirs] });

  const bound = c1.labels('pay', 'executed');
  for (let i = 0; i < 5; i++) {
    bound.inc();
    c2.inc({ route: 'pay', outcome: 'executed' });
  }
  c1.inc({ route: 'pay', outcome: 'replayed' }, 3);
  c2.inc({ route: 'pay', outcome: 'replayed' }, 3);
  // Values on, between and beyond the bounds, in two label sets.
  const values = [0.0005, 0.001, 0.004, 0.01, 0.05, 0.1, 0.7, 1, 2.5, 30];
  for (const [i, v] of values.entries()) {
    const op = i % 3 === 0 ? 'commit' : 'claim';
    h1.labels(op).observe(v);
    h2.observe({ op }, v);
  }
  h1.observe({ op: 'claim' }, 0.2);
  h2.observe({ op: 'claim' }, 0.2);

  assert.equal(await ours.metrics(), await theirs.metrics());
  assert.match(await ours.metrics(), /^x_deleted_total 0$/m, 'an unlabelled counter is shown from zero');
  u1.inc(4);
  u2.inc(4);
  assert.equal(await ours.metrics(), await theirs.metrics());
});

test('a label missing from a label object is an error, not a silently new series', () => {
  const c = new FastCounter({ name: 'y_total', help: 'y', labelNames: ['op'], registers: [new Registry()] });
  assert.throws(() => c.inc({}), /label "op" is missing/);
  assert.throws(() => c.labels('a', 'b'), /expected 1 label values/);
});
