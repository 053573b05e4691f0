// YAML text → plain tree, syntax errors with line:col, and a way to find the
// line of any path in the file (for error messages).

import { LineCounter, isAlias, isMap, isScalar, isSeq, parseDocument, type Document } from 'yaml';
import type { Path } from './issues.js';

export interface ParsedSource {
  /** The document as plain data; `{}` for an empty file. */
  readonly tree: unknown;
  /** YAML syntax errors as `line L:C: message`; the tree is unusable if any. */
  readonly syntaxErrors: readonly string[];
  /** 1-based line of the deepest key or list item along `path` that exists. */
  lineOf(path: Path): number | undefined;
}

function firstLine(message: string): string {
  const line = message.split('\n', 1)[0] ?? message;
  return line.replace(/ at line \d+, column \d+:?$/, '');
}

function keyEquals(key: unknown, segment: string | number): boolean {
  const value = isScalar(key) ? key.value : key;
  return value !== null && value !== undefined && String(value) === String(segment);
}

function locate(doc: Document.Parsed, counter: LineCounter, path: Path): number | undefined {
  let node: unknown = doc.contents;
  let line: number | undefined;
  const lineAt = (offset: number | undefined): number | undefined =>
    offset === undefined ? undefined : counter.linePos(offset).line;
  for (const segment of path) {
    if (isAlias(node)) node = node.resolve(doc);
    if (isMap(node)) {
      const pair = node.items.find((item) => keyEquals(item.key, segment));
      if (pair === undefined) break;
      const key = pair.key as { range?: [number, number, number] } | null;
      line = lineAt(key?.range?.[0]) ?? line;
      node = pair.value;
    } else if (isSeq(node) && typeof segment === 'number') {
      const item = node.items[segment] as { range?: [number, number, number] } | undefined;
      if (item === undefined) break;
      line = lineAt(item.range?.[0]) ?? line;
      node = item;
    } else {
      break;
    }
  }
  return line;
}

export function parseSource(text: string): ParsedSource {
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, merge: true, prettyErrors: true, uniqueKeys: true });
  const syntaxErrors = doc.errors.map((error) => {
    const pos = error.linePos?.[0];
    const where = pos ? `line ${pos.line}:${pos.col}` : 'unknown position';
    return `YAML syntax error at ${where}: ${firstLine(error.message)}`;
  });
  let tree: unknown = {};
  if (syntaxErrors.length === 0) {
    try {
      tree = doc.toJS({ maxAliasCount: 1000 }) ?? {};
    } catch (error) {
      // An alias bomb ("billion laughs") is refused by the yaml library.
      syntaxErrors.push(`YAML error: ${firstLine((error as Error).message)} (aliases expand to more than 1000 nodes)`);
    }
  }
  return { tree, syntaxErrors, lineOf: (path) => locate(doc, counter, path) };
}
