import { accessSync, constants, existsSync, mkdirSync, statSync } from 'node:fs';
import path from 'node:path';

const WHY: Record<string, string> = {
  EROFS: 'read-only file system',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  ENOTDIR: 'a path component is not a directory',
  ENOSPC: 'no space left on the device',
};

/** The nearest existing ancestor of `dir` (or `dir` itself). */
function existingAncestor(dir: string): string {
  let at = dir;
  while (!existsSync(at) && path.dirname(at) !== at) at = path.dirname(at);
  return at;
}

/**
 * The real reason `dir` cannot be written. A recursive mkdir on a read-only
 * file system reports ENOENT; access(2) on the nearest existing ancestor
 * reports EROFS or EACCES.
 */
function realCause(dir: string, err: NodeJS.ErrnoException): { code: string; at: string } {
  const at = existingAncestor(dir);
  try {
    accessSync(at, constants.W_OK | constants.X_OK);
  } catch (e) {
    return { code: (e as NodeJS.ErrnoException).code ?? 'EACCES', at };
  }
  return { code: err.code ?? 'error', at: err.path ?? at };
}

function owner(at: string): string {
  try {
    const s = statSync(at);
    return `, owned by ${s.uid}:${s.gid} mode ${(s.mode & 0o7777).toString(8).padStart(4, '0')}`;
  } catch {
    return '';
  }
}

/**
 * Creates the embedded store's data directory, or fails with a message that
 * names it, the reason, and the ways out (docs/operations.md, Docker: the
 * embedded store's data directory).
 */
export function prepareDataDir(dataDir: string): void {
  const dir = path.resolve(dataDir);
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK | constants.X_OK);
  } catch (e) {
    const { code, at } = realCause(dir, e as NodeJS.ErrnoException);
    const who = typeof process.getuid === 'function' ? ` (running as uid ${process.getuid()} gid ${process.getgid?.()})` : '';
    throw new Error(
      `the embedded store's data directory ${dir} cannot be created or written: ${code} (${WHY[code] ?? 'error'}) at ${at}${owner(at)}${who}. ` +
      'Either use PostgreSQL (store.postgres, DATABASE_URL or --database-url), ' +
      'or make the directory writable for this user, or point store.dataDir elsewhere: in a container, mount a volume there, ' +
      'or a tmpfs owned by the user (docker run --tmpfs /app/.idempotency-proxy:uid=1000,gid=1000); see docs/operations.md',
    );
  }
}
