// `${VAR}` and `${VAR:-default}` in every string scalar of the parsed YAML
// tree (never in map keys, never on the raw text, so a value can not inject
// YAML structure). An unset or empty variable becomes "" (`:-` uses the default
// in both cases, like the shell). `$${` writes a literal `${`.

import type { Issues, Path } from './issues.js';

const REFERENCE = /\$\$\{|\$\{([^}]*)\}|\$\{/g;
const VARIABLE = /^([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?$/s;

export type Env = Readonly<Record<string, string | undefined>>;

function interpolateString(text: string, env: Env, path: Path, issues: Issues): string {
  if (!text.includes('${')) return text;
  return text.replace(REFERENCE, (whole: string, body: string | undefined) => {
    if (whole === '$${') return '${';
    if (body === undefined) {
      issues.add(path, 'unterminated "${" (write "$${" for a literal "${")');
      return whole;
    }
    const match = VARIABLE.exec(body);
    if (match === null) {
      issues.add(path, `invalid variable reference "\${${body}}": use \${NAME} or \${NAME:-default}`);
      return whole;
    }
    const [, name, fallback] = match as unknown as [string, string, string | undefined];
    if (fallback?.includes('${')) {
      issues.add(path, `nested reference in "\${${body}}" is not supported`);
      return whole;
    }
    const value = env[name];
    if (value !== undefined && value !== '') return value;
    return fallback ?? '';
  });
}

/** A copy of `tree` with every string scalar interpolated from `env`. */
export function interpolate(tree: unknown, env: Env, issues: Issues, path: Path = []): unknown {
  if (typeof tree === 'string') return interpolateString(tree, env, path, issues);
  if (Array.isArray(tree)) return tree.map((item, index) => interpolate(item, env, issues, [...path, index]));
  if (tree !== null && typeof tree === 'object') {
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(tree)) {
      // defineProperty: a YAML key named __proto__ stays a plain field.
      Object.defineProperty(out, key, {
        value: interpolate(value, env, issues, [...path, key]),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return out;
  }
  return tree;
}
