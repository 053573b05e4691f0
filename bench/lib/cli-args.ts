// Tiny argv helpers for the bench's own processes (upstream, baseline).
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

export interface ServerArgs {
  readonly host: string;
  readonly port: number;
  readonly upstream: string | null;
  readonly connections: number;
  /** The baseline over TLS: certificate and key files (PEM); with `http2`, HTTP/2 over TLS. */
  readonly tls: { readonly cert: string; readonly key: string } | null;
  readonly http2: boolean;
}

export function parseServerArgs(argv: readonly string[]): ServerArgs {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      upstream: { type: 'string' },
      connections: { type: 'string', default: '128' },
      'tls-cert': { type: 'string' },
      'tls-key': { type: 'string' },
      http2: { type: 'boolean', default: false },
    },
    strict: true,
  });
  const port = Number(values.port);
  const connections = Number(values.connections);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port: not a port: ${values.port}`);
  if (!Number.isInteger(connections) || connections < 1) throw new Error(`--connections: not a positive integer: ${values.connections}`);
  const cert = values['tls-cert'];
  const key = values['tls-key'];
  if ((cert === undefined) !== (key === undefined)) throw new Error('--tls-cert and --tls-key go together');
  if (values.http2 === true && cert === undefined) throw new Error('--http2 needs --tls-cert and --tls-key (HTTP/2 over TLS)');
  const tls = cert !== undefined && key !== undefined ? { cert, key } : null;
  return { host: values.host ?? '127.0.0.1', port, upstream: values.upstream ?? null, connections, tls, http2: values.http2 === true };
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
