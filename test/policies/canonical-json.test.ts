// The pure parts of canonical fingerprints: canonical JSON is blind to key
// order and whitespace, and numbers are never collapsed silently.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { canonicalJson, numbersArePrecise, parsePointer, type JsonValue } from '../../src/policy/json.js';

/** Serializes with shuffled keys and random whitespace. */
function scramble(v: JsonValue, rnd: () => number): string {
  const ws = (): string => [' ', '\n', '\t', ''][Math.floor(rnd() * 4)]!;
  if (v === null || typeof v !== 'object') return ws() + JSON.stringify(v) + ws();
  if (Array.isArray(v)) return `[${v.map((x) => scramble(x, rnd)).join(',')}]`;
  const keys = Object.keys(v).sort(() => rnd() - 0.5);
  return `{${keys.map((k) => `${ws()}${JSON.stringify(k)}${ws()}:${scramble(v[k]!, rnd)}`).join(',')}}`;
}

test('canonical JSON ignores key order and whitespace', () => {
  fc.assert(fc.property(fc.jsonValue(), fc.integer(), (v, seed) => {
    let s = seed;
    const rnd = (): number => ((s = (s * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
    const doc = JSON.parse(JSON.stringify(v)) as JsonValue;
    const again = JSON.parse(scramble(doc, rnd)) as JsonValue;
    assert.equal(canonicalJson(again, []), canonicalJson(doc, []));
  }), { numRuns: 300 });
});

test('excluded pointers drop exactly that member, at any depth, ~ escapes included', () => {
  const ex = ['/timestamp', '/meta/signature', '/a~1b', '/list/1'].map(parsePointer);
  const doc = { timestamp: 1, meta: { signature: 's', source: 'x' }, 'a/b': 2, list: [1, 2, 3], keep: true };
  assert.equal(canonicalJson(doc, ex), '{"keep":true,"list":[1,2,3],"meta":{"source":"x"}}');
});

/** The exact decimal value of a JSON number lexeme, normalized: digits and exponent. */
function exact(lexeme: string): string {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(lexeme)!;
  let digits = m[2]! + (m[3] ?? '');
  let exp = BigInt(m[4] ?? '0') - BigInt((m[3] ?? '').length);
  digits = digits.replace(/^0+/, '');
  if (digits === '') return '0';
  const trailing = digits.length - digits.replace(/0+$/, '').length;
  digits = digits.slice(0, digits.length - trailing);
  exp += BigInt(trailing);
  return `${m[1]}${digits}e${exp}`;
}

const lexeme = fc.tuple(
  fc.boolean(),
  fc.stringMatching(/^(0|[1-9]\d{0,19})$/),
  fc.option(fc.stringMatching(/^\d{1,18}$/), { nil: undefined }),
  fc.option(fc.integer({ min: -330, max: 330 }), { nil: undefined }),
).map(([neg, int, frac, e]) => `${neg ? '-' : ''}${int}${frac === undefined ? '' : `.${frac}`}${e === undefined ? '' : `e${e}`}`);

test('numbers judged precise never collapse: different exact values keep different canonical forms', () => {
  fc.assert(fc.property(lexeme, lexeme, (a, b) => {
    const pa = numbersArePrecise(Buffer.from(`{"n":${a}}`));
    const pb = numbersArePrecise(Buffer.from(`{"n":${b}}`));
    if (!pa || !pb) return;
    if (exact(a) === exact(b) || (exact(a) === '0' && exact(b) === '-0') || (exact(a) === '-0' && exact(b) === '0')) return;
    if (exact(a).replace('-', '') === '0' && exact(b).replace('-', '') === '0') return;
    assert.notEqual(JSON.stringify(Number(a)), JSON.stringify(Number(b)), `${a} vs ${b}`);
  }), { numRuns: 3000 });
});

test('numbersArePrecise: examples', () => {
  const yes = ['{"a":100}', '{"a":-0.5}', '{"a":9007199254740991}', '{"a":1.5e10}', '{"a":"12345678901234567890"}',
    '{"a":0.000}', '[1e308]', '{"s":"x\\"99999999999999999999"}', '{"a":123456789012345}', 'true'];
  const no = ['{"a":9007199254740993}', '{"a":12345678901234567890}', '{"a":1.00000000000000001}', '{"a":1e400}',
    '{"a":1e-400}', '[0.1000000000000000055511151231257827]', '{"a":5e-324}'];
  for (const s of yes) assert.equal(numbersArePrecise(Buffer.from(s)), true, s);
  for (const s of no) assert.equal(numbersArePrecise(Buffer.from(s)), false, s);
});
