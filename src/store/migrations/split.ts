// A migration script as the statements it is run as, one at a time (the
// embedded store's query runs one statement; DDL is never prepared).
// Statements end at a semicolon that ends a line, except inside a
// dollar-quoted body ($fn$ … $fn$): a function's body is one statement.

const BOUNDARY = /\$([A-Za-z_][A-Za-z_0-9]*)?\$|;[ \t]*(?:\r?\n|$)/g;

export function splitStatements(sql: string): string[] {
  const out: string[] = [];
  let start = 0;
  let quote: string | null = null;
  for (const m of sql.matchAll(BOUNDARY)) {
    const token = m[0];
    if (token.startsWith('$')) {
      if (quote === null) quote = token;
      else if (token === quote) quote = null;
      continue;
    }
    if (quote !== null) continue;
    out.push(sql.slice(start, m.index));
    start = m.index! + token.length;
  }
  out.push(sql.slice(start));
  return out.map((s) => s.trim()).filter(Boolean);
}
