// docs/configuration.md documents every field the schema accepts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { configSchema } from '../../src/config/schema.js';

function findDoc(): string {
  const candidates = [
    resolve(process.cwd(), 'docs/configuration.md'),
    fileURLToPath(new URL('../../../docs/configuration.md', import.meta.url)),
  ];
  const found = candidates.find((file) => existsSync(file));
  assert.ok(found, `docs/configuration.md not found in ${candidates.join(', ')}`);
  return readFileSync(found, 'utf8');
}

/** Every field as written in the docs' tables: `upstream.url`, `fingerprint.exclude`, `match.path`. */
function fields(schema: Record<string, unknown>, prefix = ''): string[] {
  const properties = schema.properties as Record<string, Record<string, unknown>> | undefined;
  if (properties === undefined) return [];
  return Object.entries(properties).flatMap(([name, child]) => {
    const nested = child.properties !== undefined && !['key', 'tenant'].includes(name);
    const items = child.items as Record<string, unknown> | undefined;
    if (name === 'defaults' || name === 'routes') return [name, ...fields(items ?? {}, '')];
    return nested ? fields(child, `${prefix}${name}.`) : [`${prefix}${name}`];
  });
}

test('every configuration field appears in a table row of docs/configuration.md', () => {
  const doc = findDoc();
  const rows = doc.split('\n').filter((line) => line.startsWith('| `'));
  const documented = new Set(rows.map((row) => /^\| `([^`]+)`/.exec(row)?.[1]));
  const all = [...new Set(fields(configSchema()))];
  assert.ok(all.length > 40, `found only ${all.length} fields`);
  const missing = all.filter((field) => !documented.has(field));
  assert.deepEqual(missing, []);
});
