// The repository explains itself: the contract the code relies on is in
// docs/ (docs/contract.md and the pages it links to), and nothing tracked
// cites a document, a tracker entry or a path that a person who clones the
// repository alone cannot follow.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { CONTRACT_EXAMPLE } from '../config/fixtures.js';
import { repoRoot } from '../helpers/repo.js';

const ROOT = repoRoot();
const SKIP_DIRS = new Set(['.git', 'node_modules', 'dist', '.idempotency-proxy']);

/** The tracked files (git ls-files), or every file below the root outside build and dependency folders when there is no git. */
function trackedFiles(): string[] {
  try {
    return execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).split('\0').filter((f) => f !== '');
  } catch {
    const out: string[] = [];
    const walk = (dir: string): void => {
      for (const e of readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
        const rel = dir === '' ? e.name : `${dir}/${e.name}`;
        if (e.isDirectory()) {
          if (!SKIP_DIRS.has(e.name)) walk(rel);
        } else if (e.isFile()) out.push(rel);
      }
    };
    walk('');
    return out;
  }
}

/** Text files, with their lines (binary and very large files left out). */
function texts(): Array<{ file: string; lines: string[] }> {
  return trackedFiles().flatMap((file) => {
    const full = path.join(ROOT, file);
    if (!existsSync(full) || statSync(full).size > 2_000_000) return [];
    const buf = readFileSync(full);
    if (buf.includes(0)) return [];
    return [{ file, lines: buf.toString('utf8').split('\n') }];
  });
}

// What a reader of this repository alone cannot follow. The words are
// assembled here so that this file does not cite them itself.
const OUTSIDE: ReadonlyArray<{ what: string; re: RegExp }> = [
  { what: 'the product specification outside the repository (cite docs/contract.md)', re: new RegExp(`\\b${'SP'}EC\\b`) },
  { what: 'the benchmark brief outside the repository (cite bench/README.md)', re: new RegExp(`\\b${'BEN'}CH\\.md\\b`) },
  { what: 'an issue tracker entry (say what it is about, in docs/)', re: new RegExp(`\\b${'iss'}ues? #?\\d+`, 'i') },
  { what: 'a path outside the repository', re: new RegExp(`(/${'wo'}rk/|\\.\\./${'sha'}red\\b|\\b${'revi'}ews/\\d)`) },
];

test('no tracked file cites documents, issues or paths outside the repository', () => {
  const found: string[] = [];
  for (const { file, lines } of texts()) {
    lines.forEach((line, i) => {
      for (const o of OUTSIDE) if (o.re.test(line)) found.push(`${file}:${i + 1}: ${o.what}: ${line.trim().slice(0, 120)}`);
    });
  }
  assert.deepEqual(found, []);
});

test('every docs/ page cited in code, tests, the bench and the docs exists', () => {
  const missing: string[] = [];
  for (const { file, lines } of texts()) {
    lines.forEach((line, i) => {
      for (const m of line.matchAll(/(?<![\w./-])docs\/([\w-]+\.md)/g)) {
        if (!existsSync(path.join(ROOT, 'docs', m[1]!))) missing.push(`${file}:${i + 1}: docs/${m[1]}`);
      }
    });
  }
  assert.deepEqual(missing, []);
});

test('the configuration example in docs/contract.md is the one the tests load', () => {
  const doc = readFileSync(path.join(ROOT, 'docs/contract.md'), 'utf8');
  const section = doc.slice(doc.indexOf('\n## Configuration\n'));
  const block = /```yaml\n([\s\S]*?)```/.exec(section);
  assert.ok(block, 'docs/contract.md has a yaml block under "## Configuration"');
  assert.equal(block[1], CONTRACT_EXAMPLE.replace(/^\n/, ''));
});

test('docs/contract.md names every extension and says what exists today', () => {
  const doc = readFileSync(path.join(ROOT, 'docs/contract.md'), 'utf8');
  const ext = doc.slice(doc.indexOf('\n## Extensions'));
  const sections = ext.split('\n### ').slice(1);
  assert.ok(sections.length >= 7, `${sections.length} extension sections`);
  for (const s of sections) assert.match(s, /\*\*Today:\*\* /, `"${s.split('\n')[0]}" says what exists today`);
});
