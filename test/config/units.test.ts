import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { formatDuration, formatSize, parseDuration, parseSize } from '../../src/config/units.js';

test('durations with units', () => {
  assert.equal(parseDuration('500ms'), 500);
  assert.equal(parseDuration('90s'), 90_000);
  assert.equal(parseDuration('1m'), 60_000);
  assert.equal(parseDuration('24h'), 86_400_000);
  assert.equal(parseDuration('2d'), 172_800_000);
  assert.equal(parseDuration('1h30m'), 5_400_000);
  assert.equal(parseDuration('1m 30s'), 90_000);
  assert.equal(parseDuration(' 1.5s '), 1_500);
  assert.equal(parseDuration('0s'), 0);
});

test('a plain number is milliseconds, as a YAML number or a string', () => {
  assert.equal(parseDuration(250), 250);
  assert.equal(parseDuration('250'), 250);
  assert.equal(parseDuration(0), 0);
});

test('invalid durations are rejected with a message naming the input', () => {
  for (const bad of ['', '  ', '90x', 's', '1.5', '-5s', '90 seconds', '1h1h', '30m1h', '1H', '0.5ms', 'abc']) {
    assert.throws(() => parseDuration(bad), (error: Error) => error instanceof RangeError && error.message.length > 10, bad);
  }
  assert.throws(() => parseDuration(-1), /whole number >= 0/);
  assert.throws(() => parseDuration(1.5), /whole number >= 0/);
  assert.throws(() => parseDuration('90x'), /"90x".*ms, s, m, h or d/);
  assert.throws(() => parseDuration('99999999999999999d'), /too large/);
});

test('sizes: binary, decimal, bytes, spaces, case', () => {
  assert.equal(parseSize('1MiB'), 1_048_576);
  assert.equal(parseSize('64KiB'), 65_536);
  assert.equal(parseSize('1GiB'), 1_073_741_824);
  assert.equal(parseSize('1MB'), 1_000_000);
  assert.equal(parseSize('5 MB'), 5_000_000);
  assert.equal(parseSize('1kb'), 1_000);
  assert.equal(parseSize('1mib'), 1_048_576);
  assert.equal(parseSize('1.5KiB'), 1_536);
  assert.equal(parseSize('512'), 512);
  assert.equal(parseSize('512B'), 512);
  assert.equal(parseSize(512), 512);
  assert.equal(parseSize('0'), 0);
});

test('invalid sizes are rejected', () => {
  for (const bad of ['', '1M', '1 megabyte', 'MiB', '-1KiB', '0.1B', '1.0001KB', '1,5MiB']) {
    assert.throws(() => parseSize(bad), RangeError, bad);
  }
  assert.throws(() => parseSize('1M'), /unknown size unit "M".*KiB, MiB, GiB/);
  assert.throws(() => parseSize(2.5), /whole number/);
});

test('formatting is human-readable', () => {
  assert.equal(formatDuration(90_000), '1m30s');
  assert.equal(formatDuration(86_400_000), '24h');
  assert.equal(formatDuration(172_800_000), '2d');
  assert.equal(formatDuration(5_000), '5s');
  assert.equal(formatDuration(1_500), '1s500ms');
  assert.equal(formatDuration(0), '0s');
  assert.equal(formatSize(1_048_576), '1MiB');
  assert.equal(formatSize(5_000_000), '5MB');
  assert.equal(formatSize(1_500), '1500B');
  assert.equal(formatSize(0), '0B');
});

test('format then parse gives back the same number', () => {
  fc.assert(
    fc.property(fc.nat({ max: Number.MAX_SAFE_INTEGER }), (n) => {
      assert.equal(parseDuration(formatDuration(n)), n);
      assert.equal(parseSize(formatSize(n)), n);
    }),
    { numRuns: 2000 },
  );
});
