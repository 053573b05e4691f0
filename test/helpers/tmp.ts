import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

// A temporary directory a test writes files into and removes in after().

export interface TempDir {
  readonly dir: string;
  /** Writes `text` to `name` inside the directory; returns the file's path. */
  write(name: string, text: string): string;
  remove(): void;
}

export function tempDir(prefix = 'idem-test-'): TempDir {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  return {
    dir,
    write(name, text) {
      const file = path.join(dir, name);
      writeFileSync(file, text);
      return file;
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
