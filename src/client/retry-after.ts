const DELTA_SECONDS = /^\d+$/;
const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
// Sun, 06 Nov 1994 08:49:37 GMT (IMF-fixdate, what servers must send)
const IMF_FIXDATE = /^[a-z]{3}, (\d{2}) ([a-z]{3}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT$/i;
// Sunday, 06-Nov-94 08:49:37 GMT (obsolete RFC 850)
const RFC850_DATE = /^[a-z]{6,9}, (\d{2})-([a-z]{3})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) GMT$/i;
// Sun Nov  6 08:49:37 1994 (obsolete asctime)
const ASCTIME_DATE = /^[a-z]{3} ([a-z]{3}) ([ \d]\d) (\d{2}):(\d{2}):(\d{2}) (\d{4})$/i;

/**
 * Parse a `Retry-After` value (RFC 9110 §10.2.3) into milliseconds from `nowMs`.
 * Accepts delta-seconds (`"120"`) or an HTTP-date in any of the three formats
 * RFC 9110 requires recipients to accept; a date in the past gives 0. Returns
 * `null` for a missing or malformed value (the caller then falls back to its
 * own backoff). With several header lines, the first one counts.
 */
export function parseRetryAfter(value: string | string[] | undefined, nowMs: number): number | null {
  const raw = Array.isArray(value) ? value[0] : value;
  if (raw === undefined) return null;
  const text = raw.trim();
  if (DELTA_SECONDS.test(text)) {
    const seconds = Number(text);
    return Number.isSafeInteger(seconds * 1000) ? seconds * 1000 : Number.MAX_SAFE_INTEGER;
  }
  const at = parseHttpDate(text, nowMs);
  return at === null ? null : Math.max(0, at - nowMs);
}

/** An HTTP-date as epoch milliseconds, or `null` when `text` is not one. */
export function parseHttpDate(text: string, nowMs: number): number | null {
  let m = IMF_FIXDATE.exec(text);
  if (m) return utc(Number(m[3]), m[2]!, Number(m[1]), m[4]!, m[5]!, m[6]!);
  m = RFC850_DATE.exec(text);
  if (m) return utc(fullYear(Number(m[3]), nowMs), m[2]!, Number(m[1]), m[4]!, m[5]!, m[6]!);
  m = ASCTIME_DATE.exec(text);
  if (m) return utc(Number(m[6]), m[1]!, Number(m[2]!.trim()), m[3]!, m[4]!, m[5]!);
  return null;
}

function utc(year: number, monthName: string, day: number, hh: string, mm: string, ss: string): number | null {
  const month = MONTHS.indexOf(monthName.toLowerCase());
  const [h, mi, s] = [Number(hh), Number(mm), Number(ss)];
  if (month < 0 || day < 1 || day > 31 || h > 23 || mi > 59 || s > 60) return null;
  const ms = Date.UTC(year, month, day, h, mi, Math.min(s, 59));
  // Reject roll-overs such as 31 Feb.
  return new Date(ms).getUTCDate() === day ? ms : null;
}

/** RFC 9110: a two-digit year more than 50 years in the future means the past century. */
function fullYear(twoDigits: number, nowMs: number): number {
  const now = new Date(nowMs).getUTCFullYear();
  let year = Math.floor(now / 100) * 100 + twoDigits;
  if (year > now + 50) year -= 100;
  return year;
}
