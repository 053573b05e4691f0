/**
 * The one error the configuration layer throws. `errors` lists every problem
 * found (schema, semantic, YAML syntax, flags), each naming where it is, e.g.
 * `routes[1].match.path: must be a string (line 12)`.
 */
export class ConfigError extends Error {
  readonly code = 'IDEMP_CONFIG_INVALID' as const;
  readonly errors: readonly string[];

  constructor(errors: readonly string[], source?: string | null) {
    const where = source ? ` in ${source}` : '';
    const count = errors.length === 1 ? '1 error' : `${errors.length} errors`;
    super(`invalid configuration${where} (${count}):\n${errors.map((e) => `  - ${e}`).join('\n')}`);
    this.name = 'ConfigError';
    this.errors = Object.freeze([...errors]);
  }
}
