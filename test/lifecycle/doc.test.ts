// docs/lifecycle.md and the code are kept in step: every phase the doc names
// is a code unit of that name where the doc says, every phase unit in
// src/lifecycle/phases/ is in the doc, every function the doc's "who
// produces each answer" table names is defined in the file it names, and
// every outcome and problem type the lifecycle can produce is in the doc.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Problems } from '../../src/http/problems.js';
import { PHASE_NAMES } from '../../src/lifecycle/verdict.js';
import { OUTCOMES } from '../../src/metrics/metrics.js';

/** The repository root: where npm test runs, or three levels above this compiled file. */
const root = [process.cwd(), fileURLToPath(new URL('../../../', import.meta.url))].find((d) => existsSync(resolve(d, 'docs/lifecycle.md')));
assert.ok(root, 'docs/lifecycle.md not found');
const doc = readFileSync(resolve(root, 'docs/lifecycle.md'), 'utf8');
const dist = fileURLToPath(new URL('../../', import.meta.url)); // dist/

/** Table rows (cells trimmed) of the section under `heading`. */
function table(heading: string): string[][] {
  const start = doc.indexOf(`## ${heading}`);
  assert.ok(start >= 0, `docs/lifecycle.md has a "## ${heading}" section`);
  const next = doc.indexOf('\n## ', start + 3);
  const section = doc.slice(start, next === -1 ? undefined : next);
  return section.split('\n')
    .filter((l) => l.startsWith('|') && !/^\|[-| ]+\|$/.test(l))
    .slice(1) // the header row
    .map((l) => l.slice(1, -1).split('|').map((c) => c.trim()));
}

/** `src/x.ts` `symbol` → [path, symbol]. */
function codeCell(cell: string): [string, string] {
  const m = /^`(src\/[^`]+\.ts)` `([A-Za-z_$][\w$]*)`$/.exec(cell);
  assert.ok(m, `a code cell names one file and one function: "${cell}"`);
  return [m[1]!, m[2]!];
}

async function load(path: string): Promise<Record<string, unknown>> {
  return import(pathToFileURL(resolve(dist, path.replace(/\.ts$/, '.js'))).href) as Promise<Record<string, unknown>>;
}

test('every phase in the doc is a unit of that name in the file the doc names, in lifecycle order', async () => {
  const rows = table('The phases');
  const names = rows.map((r) => /^\*\*(\w+)\*\*$/.exec(r[0]!)?.[1]);
  assert.deepEqual(names, [...PHASE_NAMES], 'the doc lists the phases of src/lifecycle/verdict.ts, in order');
  for (const r of rows) {
    const name = /^\*\*(\w+)\*\*$/.exec(r[0]!)![1]!;
    const [path, symbol] = codeCell(r[1]!);
    const unit = (await load(path))[symbol];
    assert.ok(unit !== undefined, `${path} exports ${symbol}`);
    if (name === 'respond') assert.equal(typeof unit, 'function', 'respond carries out verdicts');
    else assert.equal((unit as { name?: string }).name, name, `${symbol} is the phase named "${name}"`);
  }
});

test('every phase unit in src/lifecycle/phases/ is in the doc', async () => {
  const documented = new Set(table('The phases').map((r) => codeCell(r[1]!)[0]));
  const dir = resolve(dist, 'src/lifecycle/phases');
  for (const f of readdirSync(dir).filter((f) => f.endsWith('.js'))) {
    const mod = await load(`src/lifecycle/phases/${f.replace(/\.js$/, '.ts')}`);
    const phases = Object.values(mod).filter((v) => typeof v === 'object' && v !== null && 'run' in v && 'name' in v);
    assert.ok(phases.length > 0, `src/lifecycle/phases/${f} holds a phase`);
    assert.ok(documented.has(`src/lifecycle/phases/${f.replace(/\.js$/, '.ts')}`), `src/lifecycle/phases/${f} is in the doc's phase table`);
  }
});

test('every function the "who produces each answer" table names is defined in the file it names', () => {
  const rows = table('Who produces each answer');
  assert.ok(rows.length >= 10, 'the table has its rows');
  for (const r of rows) {
    assert.equal(r.length, 4, `four columns: ${r.join(' | ')}`);
    const [path, symbol] = codeCell(r[3]!);
    const file = resolve(root, path);
    assert.ok(existsSync(file), `${path} exists`);
    const src = readFileSync(file, 'utf8');
    const defined = new RegExp(`(?:function|const|let|class)\\s+${symbol}\\b|^\\s+(?:async\\s+)?${symbol}\\s*[(:]`, 'm');
    assert.match(src, defined, `${path} defines ${symbol}`);
  }
});

test('the doc names every outcome and every problem type the proxy produces', () => {
  for (const o of OUTCOMES) assert.ok(doc.includes(`\`${o}\``), `outcome ${o}`);
  for (const p of Object.values(Problems)) assert.ok(doc.includes(p.slug), `problem ${p.slug}`);
});
