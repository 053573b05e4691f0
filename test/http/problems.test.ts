// The problem catalogue (src/http/problems.ts) and its documentation
// (docs/problems.md) are kept in step: every entry has a row with its type
// URI, status and title, and every row names an entry (the fastify habit).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PROBLEM_BASE, Problems, problemBody } from '../../src/http/problems.js';

function readDoc(name: string): string {
  const candidates = [
    resolve(process.cwd(), 'docs', name),
    fileURLToPath(new URL(`../../../docs/${name}`, import.meta.url)),
  ];
  const found = candidates.find((p) => existsSync(p));
  assert.ok(found, `docs/${name} not found in ${candidates.join(', ')}`);
  return readFileSync(found, 'utf8');
}

interface Row {
  readonly slug: string;
  readonly status: string;
  readonly title: string;
  readonly when: string;
  readonly bound: string;
}

/** Rows of the catalogue table: | `urn:…:slug` | status | title | when | key bound | */
function rows(md: string): Row[] {
  const out: Row[] = [];
  for (const line of md.split('\n')) {
    const m = /^\|\s*`([^`]+)`\s*\|(.*)\|\s*$/.exec(line);
    if (m === null || !m[1]!.startsWith(PROBLEM_BASE)) continue;
    const cells = m[2]!.split('|').map((c) => c.trim());
    assert.equal(cells.length, 4, `five columns in: ${line}`);
    out.push({ slug: m[1]!.slice(PROBLEM_BASE.length), status: cells[0]!, title: cells[1]!, when: cells[2]!, bound: cells[3]! });
  }
  return out;
}

const entries = Object.values(Problems);
const md = readDoc('problems.md');
const documented = rows(md);

test('every catalogue entry has one row in docs/problems.md with its type URI, status and title', () => {
  for (const p of entries) {
    const found = documented.filter((r) => r.slug === p.slug);
    assert.equal(found.length, 1, `${PROBLEM_BASE}${p.slug} has exactly one row in docs/problems.md`);
    const row = found[0]!;
    if (p.status === 0) {
      assert.match(row.status, /original/i, `${p.slug}: status 0 means "the original status"`);
    } else {
      assert.equal(Number(/\d{3}/.exec(row.status)?.[0]), p.status, `${p.slug}: status ${p.status} (docs say ${row.status})`);
    }
    assert.equal(row.title, p.title, `${p.slug}: title`);
    assert.ok(row.when.length > 10, `${p.slug}: says when it happens`);
    assert.ok(row.bound.length > 0, `${p.slug}: says whether the key is bound`);
  }
});

test('every row of docs/problems.md names a catalogue entry', () => {
  const slugs = new Set(entries.map((p) => p.slug));
  for (const r of documented) assert.ok(slugs.has(r.slug), `docs/problems.md documents ${r.slug}, which the catalogue does not have`);
});

test('type URIs are stable: unique slugs, lower-case with dashes', () => {
  const slugs = entries.map((p) => p.slug);
  assert.equal(new Set(slugs).size, slugs.length);
  for (const s of slugs) assert.match(s, /^[a-z]+(-[a-z]+)*$/);
});

test('a problem body carries type, title, status, detail and requestId', () => {
  const b = problemBody(Problems.inFlight, 'still running', 'req-1');
  assert.deepEqual(b, {
    type: `${PROBLEM_BASE}in-flight`, title: Problems.inFlight.title, status: 409, detail: 'still running', requestId: 'req-1',
  });
  assert.equal(problemBody(Problems.keyMismatch, 'd', 'r', 400).status, 400, 'mismatchStatus overrides the status');
});
