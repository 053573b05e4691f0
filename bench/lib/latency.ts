// Latency histogram with microsecond resolution. autocannon's own histogram
// truncates to whole milliseconds, which hides everything under 1 ms, so the
// load generator records autocannon's per-response times here instead.
import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';
import type { LatencySummary } from './types.js';

const HIGHEST_US = 120_000_000;

export interface LatencyRecorder {
  record(ms: number): void;
  summary(): LatencySummary;
}

export function latencyRecorder(): LatencyRecorder {
  const h: RecordableHistogram = createHistogram({ lowest: 1, highest: HIGHEST_US, figures: 3 });
  const ms = (us: number): number => Math.round(us) / 1000;
  return {
    record(value: number): void {
      h.record(Math.min(HIGHEST_US, Math.max(1, Math.round(value * 1000))));
    },
    summary(): LatencySummary {
      if (h.count === 0) return { p50: 0, p90: 0, p99: 0, max: 0, mean: 0 };
      return {
        p50: ms(h.percentile(50)),
        p90: ms(h.percentile(90)),
        p99: ms(h.percentile(99)),
        max: ms(h.max),
        mean: ms(h.mean),
      };
    },
  };
}
