// Runs `node --test` on the compiled test files under the given folders of
// test/ (default: all of test/), the same way on Node 20, 22, 24 and 26.
//
//   node dist/tools/run-tests.js [node --test options] [folder under test/ ...]
//   node dist/tools/run-tests.js --test-concurrency=1 faults
//
// Why not `node --test dist/test/`: Node 22 and later take positional
// arguments as files or glob patterns, not folders ("Cannot find module
// dist/test"); Node 20 has no glob patterns. An explicit list of files works
// on all four. The list comes from the TypeScript sources (test/**/*.test.ts),
// so a compiled test whose source was deleted is not run, and helper modules
// under test/ are never run as if they were tests.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** test/<folder>/**\/x.test.ts → dist/test/<folder>/**\/x.test.js, sorted. */
export function testFiles(root: string, folders: readonly string[]): string[] {
  const files: string[] = [];
  for (const folder of folders.length > 0 ? folders : ['.']) {
    const dir = join(root, 'test', folder);
    if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new Error(`no folder test/${folder}`);
    for (const entry of readdirSync(dir, { recursive: true, encoding: 'utf8' })) {
      if (!entry.endsWith('.test.ts')) continue;
      const source = relative(join(root, 'test'), join(dir, entry));
      files.push(join(root, 'dist', 'test', source.replace(/\.ts$/, '.js')));
    }
  }
  const missing = files.filter((f) => !existsSync(f));
  if (missing.length > 0) throw new Error(`not compiled (run npm run build): ${missing.map((f) => relative(root, f)).join(', ')}`);
  return [...new Set(files)].sort();
}

function main(argv: readonly string[]): void {
  const options = argv.filter((a) => a.startsWith('-'));
  const folders = argv.filter((a) => !a.startsWith('-'));
  let files: string[];
  try {
    files = testFiles(ROOT, folders);
  } catch (err) {
    process.stderr.write(`run-tests: ${(err as Error).message}\n`);
    process.exit(2);
  }
  const child = spawn(process.execPath, ['--test', ...options, ...files.map((f) => relative(process.cwd(), f))], { stdio: 'inherit' });
  // The test runner reacts to Ctrl-C itself; pass signals on, do not die first.
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => child.kill(sig));
  child.on('exit', (code, signal) => process.exit(code ?? (signal === null ? 1 : 128 + 15)));
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main(process.argv.slice(2));
