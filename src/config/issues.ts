// A problem found while loading the configuration: where it is (a path into
// the YAML tree, or a label such as `--upstream`) and what is wrong.

export type PathSegment = string | number;
export type Path = readonly PathSegment[];

export interface Issue {
  readonly path: Path;
  readonly message: string;
}

/** Collects issues in the order they are found. */
export class Issues {
  readonly list: Issue[] = [];

  add(path: Path, message: string): void {
    this.list.push({ path, message });
  }

  get size(): number {
    return this.list.length;
  }
}

const IDENTIFIER = /^[A-Za-z_$-][A-Za-z0-9_$-]*$/;

/** `['routes', 1, 'match', 'path']` → `routes[1].match.path`. */
export function formatPath(path: Path): string {
  if (path.length === 0) return '(top level)';
  let out = '';
  for (const segment of path) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else if (out === '' && (IDENTIFIER.test(segment) || segment.startsWith('--'))) out = segment;
    else if (IDENTIFIER.test(segment)) out += `.${segment}`;
    else out += `[${JSON.stringify(segment)}]`;
  }
  return out;
}
