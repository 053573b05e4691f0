// Runs the JSON Schema (ajv, allErrors) and turns ajv's errors into Issues
// that name the field in the operator's terms.

import { Ajv, type ErrorObject } from 'ajv';
import type { Issues, Path, PathSegment } from './issues.js';
import { configSchema } from './schema.js';

type SchemaNode = Record<string, unknown>;

const TYPE_WORDS: Readonly<Record<string, string>> = {
  string: 'a string',
  number: 'a number',
  integer: 'a whole number',
  boolean: 'true or false',
  object: 'a mapping',
  array: 'a list',
  null: 'empty',
};

const KIND_WORDS: Readonly<Record<string, string>> = {
  duration: 'a duration such as 90s, 24h or 500ms',
  size: 'a size such as 1MiB, 64KiB or 512',
  header: 'a header name (letters, digits and !#$%&\'*+.^_`|~-)',
  method: 'an HTTP method such as POST',
  admin: '"host:port", or false to disable the admin listener',
  status: 'a status 100–599 or a status class such as 5xx',
  'route-name': 'a name of letters, digits and _.:- (at most 64 characters, starting with a letter or digit)',
};

function pathOf(instancePath: string): PathSegment[] {
  if (instancePath === '') return [];
  return instancePath
    .slice(1)
    .split('/')
    .map((raw) => raw.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((segment) => (/^\d+$/.test(segment) ? Number(segment) : segment));
}

function kindOf(error: ErrorObject): string | undefined {
  const parent = error.parentSchema as SchemaNode | undefined;
  const kind = parent?.['x-kind'];
  return typeof kind === 'string' ? kind : undefined;
}

function propertyNames(error: ErrorObject): string[] {
  const parent = error.parentSchema as SchemaNode | undefined;
  const properties = parent?.properties;
  return properties !== null && typeof properties === 'object' ? Object.keys(properties) : [];
}

function describeValue(value: unknown): string {
  if (typeof value === 'string') return value.length > 40 ? `${JSON.stringify(value.slice(0, 40))}…` : JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) return String(value);
  return Array.isArray(value) ? 'a list' : 'a mapping';
}

function message(error: ErrorObject): { path: Path; text: string } {
  const path = pathOf(error.instancePath);
  const kind = kindOf(error);
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'additionalProperties': {
      const allowed = propertyNames(error);
      return { path: [...path, String(params.additionalProperty)], text: `unknown field (expected one of: ${allowed.join(', ')})` };
    }
    case 'required':
      return { path: [...path, String(params.missingProperty)], text: 'is required' };
    case 'type': {
      if (kind !== undefined && kind in KIND_WORDS) return { path, text: `must be ${KIND_WORDS[kind]}` };
      const types = Array.isArray(params.type) ? (params.type as string[]) : [String(params.type)];
      return { path, text: `must be ${types.map((t) => TYPE_WORDS[t] ?? t).join(' or ')}` };
    }
    case 'enum': {
      const allowed = (params.allowedValues as unknown[]).map((v) => String(v)).join(', ');
      return { path, text: `must be one of ${allowed} (got ${describeValue(error.data)})` };
    }
    case 'pattern':
      return { path, text: `must be ${kind !== undefined ? (KIND_WORDS[kind] ?? 'valid') : `matching ${String(params.pattern)}`} (got ${describeValue(error.data)})` };
    case 'minProperties':
    case 'maxProperties':
      if (kind === 'exactly-one') return { path, text: `must set exactly one of ${propertyNames(error).join(', ')}` };
      return { path, text: error.message ?? 'is invalid' };
    case 'minItems':
      return { path, text: `must not be empty` };
    case 'minLength':
      return { path, text: 'must not be empty' };
    case 'uniqueItems':
      return { path, text: `must not list ${describeValue(error.data instanceof Array ? error.data[Number(params.j)] : null)} twice` };
    case 'minimum':
    case 'maximum':
      return { path, text: `must be ${error.keyword === 'minimum' ? '>=' : '<='} ${String(params.limit)} (got ${describeValue(error.data)})` };
    default:
      return { path, text: error.message ?? 'is invalid' };
  }
}

/**
 * Validates `data` in place (ajv coerces strings such as "128" or "true" that
 * came from interpolation into the number or boolean the field needs) and
 * adds one Issue per schema violation.
 */
export function validateSchema(data: unknown, issues: Issues): void {
  const ajv = new Ajv({ allErrors: true, verbose: true, coerceTypes: true, allowUnionTypes: true, strict: true });
  ajv.addKeyword('x-kind');
  const validate = ajv.compile(configSchema());
  if (validate(data)) return;
  const seen = new Set<string>();
  for (const error of validate.errors ?? []) {
    const { path, text } = message(error);
    const id = `${JSON.stringify(path)}\u0000${text}`;
    if (seen.has(id)) continue;
    seen.add(id);
    issues.add(path, text);
  }
}
