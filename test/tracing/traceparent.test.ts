import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { hex, linkOf, ownTraceparent, TraceSpan, word } from '../../src/tracing/span.js';

// The two halves of a replay's link (src/tracing/span.ts): the traceparent a
// span writes into its upstream request and its record (hex, from words),
// and the reading of that entry straight back into words when a replay links
// to it. What is not exactly that format is refused here, and goes to the
// W3C propagator (src/tracing/spans.ts).

const sink = { record: (): void => {} };
/** Words that reach every hex digit and the sign bit. */
const T = [0x0123_4567, 0x89ab_cdef | 0, -1, 0x7fff_fff0] as const;
const S = [-0x1234_5678, 0x0000_00a1] as const;
const span = (sampled: boolean): TraceSpan =>
  new TraceSpan(sampled ? sink : null, ...T, ...S, 0, 0, false, null, 'POST /orders', 2, 0);

describe('traceparent: written from words, read back into words', () => {
  test('hex writes 8 lower-case digits of the unsigned word', () => {
    for (const w of [0, 1, 0xf, 0x10, 0x7fff_ffff, -1, -0x8000_0000, 0x0123_4567, 0x89ab_cdef | 0]) {
      assert.equal(hex(w), (w >>> 0).toString(16).padStart(8, '0'), `word ${w}`);
    }
  });

  test('a span writes its ids and sampled flag, once', () => {
    const sampled = span(true);
    const tp = sampled.traceparent();
    assert.equal(tp, '00-0123456789abcdefffffffff7ffffff0-edcba988000000a1-01');
    assert.equal(sampled.traceparent(), tp);
    assert.equal(span(false).traceparent().slice(-3), '-00');
  });

  test('ids of every value: the traceparent is the hex of the words, flags 01 sampled, 00 not', () => {
    const w = (): number => (Math.random() * 0x1_0000_0000) | 0;
    for (let i = 0; i < 2000; i++) {
      const ids = [w(), w(), w(), w(), w(), w()] as const;
      const sampled = i % 2 === 0;
      const tp = new TraceSpan(sampled ? sink : null, ...ids, 0, 0, false, null, 'x', 2, 0).traceparent();
      assert.equal(tp, `00-${ids.slice(0, 4).map(hex).join('')}-${ids.slice(4).map(hex).join('')}-0${sampled ? 1 : 0}`);
    }
  });

  test('Buffer#latin1Slice, which the writing calls directly, is there and reads what Buffer#toString does in Latin-1', () => {
    const direct = (Buffer.prototype as unknown as Record<string, unknown>).latin1Slice;
    assert.equal(typeof direct, 'function', `Node ${process.version} has no Buffer.prototype.latin1Slice: src/tracing/span.ts needs another way to make a traceparent`);
    const b = Buffer.from([0x30, 0x2d, 0x61, 0xe9, 0xff, 0x00, 0x7a]);
    assert.equal((direct as (this: Buffer, start: number, end: number) => string).call(b, 1, 6), b.toString('latin1', 1, 6));
  });

  test('our own traceparent reads back into the same words and flag', () => {
    for (const sampled of [true, false]) {
      const link = { ...ownTraceparent(span(sampled).traceparent()) };
      assert.deepEqual(link, { t0: T[0], t1: T[1], t2: T[2], t3: T[3], s0: S[0], s1: S[1], sampled, traceState: null });
    }
  });

  test('it agrees with the words of the propagator path (linkOf)', () => {
    const tp = span(true).traceparent();
    const viaRef = linkOf({ traceId: tp.slice(3, 35), spanId: tp.slice(36, 52), sampled: true, traceState: null });
    assert.deepEqual(ownTraceparent(tp), viaRef);
    assert.equal(word(tp.slice(3, 35), 2), T[2]);
  });

  test('Buffer#latin1Write, which the reading calls directly, is there and writes what Buffer#write does in Latin-1', () => {
    const direct = (Buffer.prototype as unknown as Record<string, unknown>).latin1Write;
    assert.equal(typeof direct, 'function', `Node ${process.version} has no Buffer.prototype.latin1Write: src/tracing/span.ts needs another way to write a traceparent's bytes`);
    const s = `${span(true).traceparent().slice(0, 40)}é\u0161${span(true).traceparent().slice(42)}`;
    const a = Buffer.alloc(64);
    const b = Buffer.alloc(64);
    assert.equal((direct as (this: Buffer, s: string, at: number, n: number) => number).call(a, s, 0, 55), 55);
    b.write(s, 0, 55, 'latin1');
    assert.deepEqual(a, b);
  });

  test('anything else is refused: version, separators, case, digits, flags, length, all-zero ids', () => {
    const good = span(true).traceparent();
    const bad = [
      good.replace(/^00/, '01'),
      good.toUpperCase(),
      `${good.slice(0, 10)}g${good.slice(11)}`,
      `${good.slice(0, 40)}é${good.slice(41)}`,
      // Latin-1 characters whose low seven bits are hex digits ('°' 0xb0 → '0', 'á' 0xe1 → 'a'): refused, not aliased.
      `${good.slice(0, 10)}°${good.slice(11)}`,
      `${good.slice(0, 45)}á${good.slice(46)}`,
      `${good.slice(0, 35)}_${good.slice(36)}`,
      `${good.slice(0, 2)}_${good.slice(3)}`,
      good.replace(/-01$/, '-02'),
      good.replace(/-01$/, '-11'),
      `${good}0`,
      good.slice(0, -1),
      `00-${'0'.repeat(32)}-${good.slice(36, 52)}-01`,
      `00-${good.slice(3, 35)}-${'0'.repeat(16)}-01`,
      '',
    ];
    for (const tp of bad) assert.equal(ownTraceparent(tp), null, tp);
  });
});
