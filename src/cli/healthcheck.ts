import type { CommandModule } from 'yargs';
import type { CliIo } from './io.js';
import type { Outcome } from './index.js';
import { withServeFlags, type CommonArgs } from './options.js';

interface HealthArgs extends CommonArgs {
  upstream?: string;
  listen?: string;
  admin?: string;
  'redis-url'?: string;
  'log-level'?: string;
  timeout: number;
}

type Address = { readonly host: string; readonly port: number };

/** A wildcard bind address is probed on loopback; a named host as it is. */
function probeHost(host: string): string {
  if (host === '0.0.0.0' || host === '') return '127.0.0.1';
  if (host === '::' || host === '[::]') return '[::1]';
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
}

async function adminHealthy(admin: Address, timeoutMs: number): Promise<string | null> {
  const url = `http://${probeHost(admin.host)}:${admin.port}/healthz`;
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    await res.arrayBuffer();
    return res.ok ? null : `${url}: HTTP ${res.status}`;
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
    return `${url}: ${cause}`;
  }
}

/** Without an admin listener there is no /healthz: the client listener must accept a connection. */
async function listenerAccepts(listen: Address, timeoutMs: number): Promise<string | null> {
  const { connect } = await import('node:net');
  const host = probeHost(listen.host).replace(/^\[|\]$/g, '');
  return new Promise((resolve) => {
    const socket = connect({ host, port: listen.port, timeout: timeoutMs });
    socket.once('connect', () => { socket.destroy(); resolve(null); });
    socket.once('timeout', () => { socket.destroy(); resolve(`${host}:${listen.port}: no answer in ${timeoutMs} ms`); });
    socket.once('error', (err: NodeJS.ErrnoException) => resolve(`${host}:${listen.port}: ${err.code ?? err.message}`));
  });
}

/**
 * `healthcheck`: the image's HEALTHCHECK. It resolves the admin address from
 * the same file and flags as `serve`, so moving or disabling the admin
 * listener does not make a serving container unhealthy (docs/operations.md,
 * Docker). Exit 0 healthy, 1 not (Docker reserves 2).
 */
export function healthcheckCommand(io: CliIo, outcome: Outcome): CommandModule<CommonArgs, HealthArgs> {
  return {
    command: 'healthcheck',
    describe: "Probe a running proxy's /healthz at the admin address its configuration names (exit 0 healthy, 1 not)",
    builder: (y) => withServeFlags(y)
      .option('timeout', { type: 'number', default: 2000, describe: 'milliseconds to wait for the answer' })
      .example('$0 healthcheck --config /etc/idempotency-proxy/config.yaml', 'what the Docker image runs'),
    handler: async (args) => {
      const { loadConfig } = await import('../config/load.js');
      let admin: Address | null;
      let listen: Address;
      try {
        // The upstream is not contacted: a file without one (given by flag to serve) still resolves.
        const config = loadConfig({
          file: args.config ?? null,
          flags: { upstream: args.upstream ?? 'http://127.0.0.1:1', listen: args.listen ?? null, admin: args.admin ?? null, databaseUrl: args['database-url'] ?? null },
          env: io.env,
        });
        ({ admin, listen } = config);
      } catch (err) {
        io.stderr.write(`idempotency-proxy healthcheck: ${(err as Error).message}\n`);
        outcome.code = 1;
        return;
      }
      const problem = admin !== null ? await adminHealthy(admin, args.timeout) : await listenerAccepts(listen, args.timeout);
      if (problem !== null) {
        io.stderr.write(`idempotency-proxy healthcheck: unhealthy: ${problem}\n`);
        outcome.code = 1;
        return;
      }
      io.stdout.write(admin !== null ? 'healthy\n' : 'healthy (admin listener off: the client listener accepts connections)\n');
    },
  };
}
