import pino, { type Logger } from 'pino';
import { keyHash } from './logger.js';

// The one line per request (docs/operations.md), written by hand. It is the
// only log line of a normal request, and pino's generic serializer costs
// about 4 µs for it; this template costs under 1. The line is the one pino
// would write through the same logger: same destination, level label, epoch
// time, bindings, field order and "msg". It is written only while the
// logger's level lets info through (a reload can change the level).

/** What the line says about a request (RequestContext has these fields). */
export interface RequestLine {
  readonly requestId: string;
  readonly method: string;
  readonly path: string;
  readonly outcome: string;
  /** The phase whose verdict answered the request. */
  readonly phase: string;
  /** Who failed, on a failure: store, upstream, internal (null otherwise). */
  readonly source: string | null;
  readonly status: number;
  readonly tenantId: string;
  /** Logged only as a short hash (keyHash). */
  readonly key: string | null;
  readonly attempt: number;
  readonly released: boolean;
  readonly shadow: string | null;
  /** The outcome probe's result (found, absent, failed); null when none was sent. */
  readonly probe: string | null;
  readonly cache: string | null;
  readonly detail: string | null;
  readonly upstreamMs: number;
  readonly storeMs: number;
}

interface Destination {
  write(line: string): unknown;
}

export type RequestLog = (r: RequestLine, route: string, ms: number) => void;

const round3 = (ms: number): number => Math.round(ms * 1000) / 1000;

/**
 * `String(round3(ms))` without the double-to-shortest-string conversion
 * (about a thousand instructions a number): milliseconds with at most three
 * decimals, trailing zeros dropped, built from small integers. Outside
 * 0 ≤ µs < 2^31 (35 minutes) it falls back to String(round3(ms)).
 */
export function ms3(ms: number): string {
  const us = Math.round(ms * 1000);
  if (!(us >= 0 && us < 2147483648)) return String(round3(ms));
  const whole = Math.floor(us / 1000);
  const frac = us - whole * 1000;
  if (frac === 0) return `${whole}`;
  if (frac % 100 === 0) return `${whole}.${frac / 100}`;
  if (frac % 10 === 0) return `${whole}.${frac < 100 ? '0' : ''}${frac / 10}`;
  return `${whole}.${frac < 10 ? '00' : frac < 100 ? '0' : ''}${frac}`;
}

export function createRequestLog(logger: Logger): RequestLog {
  const stream = (logger as unknown as Record<symbol, Destination>)[pino.symbols.streamSym]!;
  const quoted = new Map<string, string>(); // route names and outcomes: a handful of strings, quoted once
  const q = (s: string): string => {
    let v = quoted.get(s);
    if (v === undefined) {
      // Re-decoded so that an ASCII name becomes a one-byte string: names
      // sliced from a config file holding any non-Latin-1 character are
      // two-byte strings, and one of them makes every line two-byte, slower
      // to build and to encode.
      v = Buffer.from(JSON.stringify(s), 'utf8').toString('utf8');
      if (quoted.size < 1024) quoted.set(s, v);
    }
    return v;
  };
  let lastMs = 0;
  let lastTime = '0'; // Date.now() as text: under load many lines share a millisecond
  return (r, route, ms) => {
    if (!logger.isLevelEnabled('info')) return;
    // Bindings are read per line: a child logger or a reload may change them.
    const bindings = (logger as unknown as Record<symbol, string>)[pino.symbols.chindingsSym] ?? '';
    const now = Date.now();
    if (now !== lastMs) {
      lastMs = now;
      lastTime = String(now);
    }
    let line = `{"level":"info","time":${lastTime}${bindings},"requestId":${JSON.stringify(r.requestId)},"route":${q(route)}` +
      `,"method":${q(r.method)},"path":${JSON.stringify(r.path)},"outcome":${q(r.outcome)},"phase":${q(r.phase)},"status":${r.status}`;
    if (r.source !== null) line += `,"source":${q(r.source)}`;
    if (r.key !== null) line += `,"key":"${keyHash(r.tenantId, r.key)}"`;
    if (r.attempt) line += `,"attempt":${r.attempt}`;
    if (r.released) line += ',"released":true';
    if (r.shadow !== null) line += `,"shadow":${q(r.shadow)}`;
    if (r.probe !== null) line += `,"probe":${q(r.probe)}`;
    if (r.cache !== null) line += `,"cache":"${r.cache}"`;
    if (r.detail !== null) line += `,"detail":${JSON.stringify(r.detail)}`;
    line += `,"ms":${ms3(ms)}`;
    if (r.upstreamMs >= 0) line += `,"upstreamMs":${ms3(r.upstreamMs)}`;
    if (r.storeMs > 0) line += `,"storeMs":${ms3(r.storeMs)}`;
    stream.write(`${line},"msg":"request"}\n`);
  };
}
