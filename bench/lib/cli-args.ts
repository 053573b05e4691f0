// Tiny argv helpers for the bench's own processes (upstream, baseline).
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

export interface ServerArgs {
  readonly host: string;
  readonly port: number;
  readonly upstream: string | null;
  readonly connections: number;
}

export function parseServerArgs(argv: readonly string[]): ServerArgs {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      upstream: { type: 'string' },
      connections: { type: 'string', default: '128' },
    },
    strict: true,
  });
  const port = Number(values.port);
  const connections = Number(values.connections);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port: not a port: ${values.port}`);
  if (!Number.isInteger(connections) || connections < 1) throw new Error(`--connections: not a positive integer: ${values.connections}`);
  return { host: values.host ?? '127.0.0.1', port, upstream: values.upstream ?? null, connections };
}

/** True when `moduleUrl` is the file node was started with. */
export function isEntry(moduleUrl: string): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  try {
    return pathToFileURL(realpathSync(entry)).href === moduleUrl;
  } catch {
    return false;
  }
}
