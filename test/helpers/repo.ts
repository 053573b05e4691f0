import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// Where the repository is, for tests that read its files (docs, Dockerfile, package.json).

/** Repository root: the working directory (npm test runs there), else three levels above dist/test/<dir>. */
export function repoRoot(): string {
  const isRoot = (dir: string): boolean => {
    try {
      return (JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string }).name === 'idempotency-proxy';
    } catch {
      return false;
    }
  };
  const fromDist = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
  const found = [process.cwd(), fromDist].find(isRoot);
  if (found === undefined) throw new Error(`repository root not found (run the tests from the repository; tried ${process.cwd()} and ${fromDist})`);
  return found;
}
