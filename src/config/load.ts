// The pipeline: read → YAML parse → ${VAR} → schema → semantic checks,
// units and defaults → flags → freeze. Every problem is collected and thrown
// together as one ConfigError.

import { readFileSync } from 'node:fs';
import type { Config } from './types.js';
import { ConfigError } from './errors.js';
import { deepFreeze } from './freeze.js';
import { interpolate, type Env } from './interpolate.js';
import { Issues, formatPath } from './issues.js';
import { resolveConfig, type ConfigFlags } from './resolve.js';
import { parseSource, type ParsedSource } from './source.js';
import { validateSchema } from './validate-schema.js';

export interface LoadConfigOptions {
  /** YAML file to read; null/undefined with no `text` means flags only. */
  readonly file?: string | null;
  /** YAML text (wins over reading `file`; `file` then only names it in messages). */
  readonly text?: string;
  readonly flags?: ConfigFlags;
  /** Variables for ${VAR}, DATABASE_URL and REDIS_URL; defaults to process.env. */
  readonly env?: NodeJS.ProcessEnv | Env;
}

function readText(opts: LoadConfigOptions): string | null {
  if (opts.text !== undefined) return opts.text;
  if (opts.file === undefined || opts.file === null) return null;
  try {
    return readFileSync(opts.file, 'utf8');
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new ConfigError([`cannot read config file ${opts.file}: ${reason}`], opts.file);
  }
}

/** One line per distinct issue, in file order (issues without a line last). */
function formatIssues(issues: Issues, source: ParsedSource | null): string[] {
  const lines = issues.list.map((issue) => {
    const line = source?.lineOf(issue.path);
    return { line: line ?? Infinity, text: `${formatPath(issue.path)}: ${issue.message}${line === undefined ? '' : ` (line ${line})`}` };
  });
  lines.sort((a, b) => a.line - b.line); // stable: same line keeps discovery order
  return [...new Set(lines.map((l) => l.text))];
}

/** Loads, validates and freezes the configuration, or throws ConfigError listing every problem. */
export function loadConfig(opts: LoadConfigOptions = {}): Config {
  const env: Env = opts.env ?? process.env;
  const text = readText(opts);
  const sourceName = opts.file ?? null;
  const source = text === null ? null : parseSource(text);
  if (source !== null && source.syntaxErrors.length > 0) throw new ConfigError(source.syntaxErrors, sourceName);

  const issues = new Issues();
  const tree = interpolate(source?.tree ?? {}, env, issues);
  validateSchema(tree, issues);
  const config = resolveConfig(tree, opts.flags ?? {}, env, issues);

  if (issues.size > 0) {
    throw new ConfigError(formatIssues(issues, source), sourceName);
  }
  return deepFreeze(config);
}
