import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { backoffCeiling, fullJitterDelay } from '../../src/client/backoff.js';
import { seededRandom } from './helpers/random.js';

const policy = { baseDelayMs: 100, maxDelayMs: 2_000 };

describe('backoff: exponential ceiling with full jitter', () => {
  test('the ceiling doubles per retry and stops at maxDelayMs', () => {
    assert.deepEqual([1, 2, 3, 4, 5, 6, 20].map((r) => backoffCeiling(r, policy)), [100, 200, 400, 800, 1600, 2000, 2000]);
  });

  test('a huge retry number stays capped (no Infinity, no NaN)', () => {
    assert.equal(backoffCeiling(5_000, policy), 2_000);
  });

  test('every jittered delay lies in [0, ceiling) over many seeded draws', () => {
    const random = seededRandom(42);
    for (let retry = 1; retry <= 8; retry++) {
      const ceiling = backoffCeiling(retry, policy);
      const draws = Array.from({ length: 500 }, () => fullJitterDelay(retry, policy, random));
      for (const d of draws) {
        assert.ok(Number.isInteger(d) && d >= 0 && d < ceiling, `retry ${retry}: ${d} not in [0, ${ceiling})`);
      }
      // Full jitter spreads over the whole range, not just near the ceiling.
      assert.ok(Math.min(...draws) < ceiling * 0.1, `retry ${retry}: min ${Math.min(...draws)}`);
      assert.ok(Math.max(...draws) > ceiling * 0.9, `retry ${retry}: max ${Math.max(...draws)}`);
    }
  });

  test('the same seed gives the same delays', () => {
    const a = seededRandom(7);
    const b = seededRandom(7);
    const seqA = Array.from({ length: 10 }, (_, i) => fullJitterDelay(i + 1, policy, a));
    const seqB = Array.from({ length: 10 }, (_, i) => fullJitterDelay(i + 1, policy, b));
    assert.deepEqual(seqA, seqB);
  });

  test('the edges of random() map to 0 and just under the ceiling; out-of-range values are treated as 0', () => {
    assert.equal(fullJitterDelay(3, policy, () => 0), 0);
    assert.equal(fullJitterDelay(3, policy, () => 0.999999), 399);
    assert.equal(fullJitterDelay(3, policy, () => 1), 0);
    assert.equal(fullJitterDelay(3, policy, () => Number.NaN), 0);
  });
});
