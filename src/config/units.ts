// Human-readable durations (90s, 24h, 1h30m, 500ms) and sizes (1MiB, 64KiB,
// 5 MB). A plain number means milliseconds for a duration and bytes for a size.
// Arithmetic is exact (BigInt), so 1.5s is 1500 and 0.5ms is an error.

const DURATION_UNITS: ReadonlyMap<string, bigint> = new Map([
  ['d', 86_400_000n],
  ['h', 3_600_000n],
  ['m', 60_000n],
  ['s', 1_000n],
  ['ms', 1n],
]);

const SIZE_UNITS: ReadonlyMap<string, bigint> = new Map([
  ['b', 1n],
  ['kb', 1_000n],
  ['mb', 1_000_000n],
  ['gb', 1_000_000_000n],
  ['kib', 1_024n],
  ['mib', 1_048_576n],
  ['gib', 1_073_741_824n],
]);

const DURATION_HELP = 'use a number with a unit ms, s, m, h or d (e.g. 500ms, 90s, 24h, 1h30m); a plain number means milliseconds';
const SIZE_HELP = 'use a number with a unit B, KiB, MiB, GiB (1024-based) or KB, MB, GB (1000-based), e.g. 1MiB; a plain number means bytes';

const PLAIN_INTEGER = /^\d+$/;
const DURATION_PART = /(\d+)(?:\.(\d+))?\s*(ms|s|m|h|d)\s*/y;
const SIZE_TEXT = /^(\d+)(?:\.(\d+))?\s*([A-Za-z]*)$/;

/** Exact `int.frac × unit`, or null when the result is not a whole number. */
function scale(int: string, frac: string | undefined, unit: bigint): bigint | null {
  const digits = BigInt(int + (frac ?? ''));
  const divisor = 10n ** BigInt(frac?.length ?? 0);
  const scaled = digits * unit;
  return scaled % divisor === 0n ? scaled / divisor : null;
}

function toSafeNumber(value: bigint, what: string, input: string): number {
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError(`${what} ${JSON.stringify(input)} is too large`);
  return Number(value);
}

function checkPlainNumber(input: number, what: string, unit: string): number {
  if (!Number.isSafeInteger(input) || input < 0) {
    throw new RangeError(`invalid ${what} ${input}: a plain number means ${unit} and must be a whole number >= 0`);
  }
  return input;
}

/**
 * The longest duration the proxy can time: Node's timers hold at most 2^31 − 1 ms (about 24.8 days) and fire
 * after 1 ms, with a warning, for anything longer. So every duration the proxy counts down (upstream.timeout, lease,
 * store.timeout…) is bounded by a round 24 days; only `ttl`, kept by the store, is not.
 */
export const MAX_TIMED_MS = 24 * 86_400_000;

/** The issue with a timed duration of `ms`, or null. */
export function timedDurationIssue(ms: number): string | null {
  if (ms === 0) return 'must be longer than 0';
  if (ms > MAX_TIMED_MS) return `must be at most 24d: the proxy times it, and its timers run at most about 24.8 days (${formatDuration(ms)} given)`;
  return null;
}

/** Milliseconds in `input`: `90s` → 90000, `1h30m` → 5400000, `250` → 250. */
export function parseDuration(input: string | number): number {
  if (typeof input === 'number') return checkPlainNumber(input, 'duration', 'milliseconds');
  const text = input.trim();
  if (text === '') throw new RangeError(`empty duration: ${DURATION_HELP}`);
  if (PLAIN_INTEGER.test(text)) return toSafeNumber(BigInt(text), 'duration', input);
  let total = 0n;
  let position = 0;
  let previousUnit = Infinity;
  DURATION_PART.lastIndex = 0;
  while (position < text.length) {
    DURATION_PART.lastIndex = position;
    const match = DURATION_PART.exec(text);
    if (match === null) throw new RangeError(`invalid duration ${JSON.stringify(input)}: ${DURATION_HELP}`);
    const [, int, frac, unitName] = match as unknown as [string, string, string | undefined, string];
    const unit = DURATION_UNITS.get(unitName) as bigint;
    if (Number(unit) >= previousUnit) {
      throw new RangeError(`invalid duration ${JSON.stringify(input)}: give units once each, largest first (e.g. 1h30m)`);
    }
    previousUnit = Number(unit);
    const part = scale(int, frac, unit);
    if (part === null) throw new RangeError(`invalid duration ${JSON.stringify(input)}: must be a whole number of milliseconds`);
    total += part;
    position = DURATION_PART.lastIndex;
  }
  return toSafeNumber(total, 'duration', input);
}

/** Bytes in `input`: `1MiB` → 1048576, `5 MB` → 5000000, `512` → 512. */
export function parseSize(input: string | number): number {
  if (typeof input === 'number') return checkPlainNumber(input, 'size', 'bytes');
  const text = input.trim();
  if (text === '') throw new RangeError(`empty size: ${SIZE_HELP}`);
  const match = SIZE_TEXT.exec(text);
  if (match === null) throw new RangeError(`invalid size ${JSON.stringify(input)}: ${SIZE_HELP}`);
  const [, int, frac, unitName] = match as unknown as [string, string, string | undefined, string];
  const unit = SIZE_UNITS.get(unitName.toLowerCase() || 'b');
  if (unit === undefined) throw new RangeError(`unknown size unit ${JSON.stringify(unitName)} in ${JSON.stringify(input)}: ${SIZE_HELP}`);
  const bytes = scale(int, frac, unit);
  if (bytes === null) throw new RangeError(`invalid size ${JSON.stringify(input)}: must be a whole number of bytes`);
  return toSafeNumber(bytes, 'size', input);
}

/** `5400000` → `1h30m`, `86400000` → `24h`, `172800000` → `2d`, `0` → `0s`. The inverse of parseDuration. */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  const day = DURATION_UNITS.get('d') as bigint;
  let rest = BigInt(ms);
  // Whole days from 2d up; below that hours read better (24h, 36h).
  if (rest % day === 0n && rest >= 2n * day) return `${rest / day}d`;
  let out = '';
  for (const [name, unit] of DURATION_UNITS) {
    if (name === 'd') continue;
    const count = rest / unit;
    if (count > 0n) out += `${count}${name}`;
    rest %= unit;
  }
  return out;
}

/** `1048576` → `1MiB`, `5000000` → `5MB`, `1500` → `1500B`. The inverse of parseSize. */
export function formatSize(bytes: number): string {
  if (bytes === 0) return '0B';
  const value = BigInt(bytes);
  for (const [name, unit] of [['GiB', 1_073_741_824n], ['MiB', 1_048_576n], ['KiB', 1_024n], ['GB', 1_000_000_000n], ['MB', 1_000_000n], ['KB', 1_000n]] as const) {
    if (value % unit === 0n) return `${value / unit}${name}`;
  }
  return `${bytes}B`;
}
