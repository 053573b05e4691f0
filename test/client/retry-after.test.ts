import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { parseRetryAfter } from '../../src/client/retry-after.js';

const NOW = Date.UTC(2025, 0, 15, 12, 0, 0); // Wed, 15 Jan 2025 12:00:00 GMT

describe('Retry-After parsing', () => {
  test('delta-seconds become milliseconds', () => {
    assert.equal(parseRetryAfter('0', NOW), 0);
    assert.equal(parseRetryAfter('1', NOW), 1_000);
    assert.equal(parseRetryAfter(' 120 ', NOW), 120_000);
  });

  test('IMF-fixdate in the future gives the distance from now', () => {
    assert.equal(parseRetryAfter('Wed, 15 Jan 2025 12:00:30 GMT', NOW), 30_000);
  });

  test('obsolete RFC 850 and asctime dates are accepted too', () => {
    assert.equal(parseRetryAfter('Wednesday, 15-Jan-25 12:01:00 GMT', NOW), 60_000);
    assert.equal(parseRetryAfter('Wed Jan 15 12:00:05 2025', NOW), 5_000);
    assert.equal(parseRetryAfter('Wed Jan  5 12:00:00 2025', NOW), 0); // past, single-digit day
  });

  test('a date in the past means "now"', () => {
    assert.equal(parseRetryAfter('Tue, 14 Jan 2025 12:00:00 GMT', NOW), 0);
  });

  test('malformed values are null so the caller falls back to backoff', () => {
    for (const bad of ['', '-1', '1.5', '1e3', 'soon', 'abc 2026', 'Wed, 31 Feb 2025 12:00:00 GMT', 'Wed, 15 Jan 2025 25:00:00 GMT', '15 Jan 2025']) {
      assert.equal(parseRetryAfter(bad, NOW), null, `"${bad}"`);
    }
    assert.equal(parseRetryAfter(undefined, NOW), null);
  });

  test('with several header lines the first counts', () => {
    assert.equal(parseRetryAfter(['2', '9'], NOW), 2_000);
  });

  test('an absurdly large delta does not overflow into a negative or NaN wait', () => {
    const ms = parseRetryAfter('99999999999999999999', NOW);
    assert.ok(ms !== null && ms > 0 && Number.isFinite(ms));
  });
});
