// PostgreSQL and Redis for one benchmark run. The method (bench/README.md)
// pins them to CPU 0 with the servers, but the machine's shared instances are never
// reconfigured (nor re-pinned). So, unless BENCH_PG_URL / BENCH_REDIS_URL
// name a server (or BENCH_SERVICES=machine asks for the machine's), the run
// starts its own: a fresh PostgreSQL cluster (initdb in a temporary
// directory, fsync and synchronous_commit on, the server defaults otherwise)
// and a redis-server without persistence, each started under `taskset -c 0`
// and under the harness's guard, so they go away with the run. Where the
// binaries are missing, the run falls back to the machine's servers and says
// so in the table header.
import { mkdtempSync, rmSync, statfsSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { asPostgresUser, freePort, initCluster, postgresBinDir, postgresOptions, redisServerArgs } from '../../tools/local-servers.js';
import type { ServerHandle } from './children.js';
import type { BenchContext } from './context.js';
import { SERVER_CPU } from './servers.js';

export interface Services {
  readonly adminUrl: string;
  readonly redisUrl: string;
  /** True when the run started its own (false: an existing server, also after a fallback). */
  readonly ownPostgres: boolean;
  readonly ownRedis: boolean;
  /** For the table header: where PostgreSQL and Redis ran. */
  readonly description: string;
  /** Stops them; a cluster of the run's own is deleted unless `keep`. */
  stop(keep: boolean): Promise<void>;
}

type Ctx = Pick<BenchContext, 'opts' | 'pin' | 'children' | 'tmp' | 'log'>;

const TMPFS_MAGIC = 0x01021994;

function onPath(cmd: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

async function startPostgres(ctx: Ctx, bin: string): Promise<{ handle: ServerHandle; dir: string; tmpfs: boolean }> {
  const parent = process.env['BENCH_PG_DIR'] ?? tmpdir();
  let dir: string;
  try {
    dir = mkdtempSync(join(parent, 'idem-bench-pg-'));
  } catch (err) {
    throw new Error(`BENCH_PG_DIR=${parent}: cannot create the cluster's directory there (${(err as Error).message})`);
  }
  try {
    const asUser = asPostgresUser();
    const data = initCluster(bin, dir, { sync: true });
    const port = await freePort();
    const handle = await ctx.children.start({
      name: 'postgres',
      command: [
        ...asUser, ...ctx.pin.prefix(SERVER_CPU), join(bin, 'postgres'), '-D', data,
        ...postgresOptions(port, dir, { fsync: 'on', synchronous_commit: 'on', max_connections: '200' }),
      ],
      logFile: join(ctx.tmp, 'postgres.log'),
      env: { ...process.env, LC_ALL: 'C' },
      cwd: dir,
      timeoutMs: 30_000,
      ready: (line) => (line.includes('ready to accept connections') ? `postgres://postgres@127.0.0.1:${port}/postgres` : null),
    });
    return { handle, dir, tmpfs: statfsSync(dir).type === TMPFS_MAGIC };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true }); // initdb or the start failed: nothing to keep
    throw err;
  }
}

async function startRedis(ctx: Ctx): Promise<ServerHandle> {
  const port = await freePort();
  return ctx.children.start({
    name: 'redis',
    command: [
      ...ctx.pin.prefix(SERVER_CPU), 'redis-server', ...redisServerArgs(port),
    ],
    logFile: join(ctx.tmp, 'redis.log'),
    env: process.env,
    cwd: ctx.tmp,
    timeoutMs: 10_000,
    ready: (line) => (line.includes('Ready to accept connections') ? `redis://127.0.0.1:${port}` : null),
  });
}

export async function startServices(ctx: Ctx): Promise<Services> {
  const { opts } = ctx;
  const stops: Array<(keep: boolean) => Promise<void>> = [];
  const parts: string[] = [];
  let adminUrl = opts.adminUrl;
  let redisUrl = opts.redisUrl;
  let ownPostgres = false;
  let ownRedis = false;
  const where = ctx.pin.enabled ? `pinned to CPU ${SERVER_CPU}` : 'not pinned';

  const bin = opts.ownPostgres ? postgresBinDir() : null;
  if (bin !== null) {
    const pg = await startPostgres(ctx, bin);
    adminUrl = pg.handle.url;
    ownPostgres = true;
    stops.push(async (keep) => {
      await pg.handle.stop();
      if (keep) ctx.log(`PostgreSQL cluster kept in ${pg.dir} (start it with: postgres -D ${pg.dir}/data -k ${pg.dir})`);
      else rmSync(pg.dir, { recursive: true, force: true });
    });
    parts.push(`PostgreSQL: the run's own cluster (${where}${pg.tmpfs ? '; its data directory is on tmpfs, so fsync costs nothing: set BENCH_PG_DIR to a disk' : ''})`);
    ctx.log(`postgres ${adminUrl} (pid ${pg.handle.pid}, data in ${pg.dir})`);
  } else {
    const why = opts.ownPostgres ? ', no PostgreSQL server binaries under /usr/lib/postgresql' : '';
    parts.push(`PostgreSQL: the machine's (${adminUrl}, not pinned${why})`);
  }

  if (opts.ownRedis && onPath('redis-server')) {
    const redis = await startRedis(ctx);
    redisUrl = redis.url;
    ownRedis = true;
    stops.push(() => redis.stop());
    parts.push(`Redis: the run's own (${where})`);
    ctx.log(`redis ${redisUrl} (pid ${redis.pid})`);
  } else {
    parts.push(`Redis: the machine's (${redisUrl}, not pinned${opts.ownRedis ? ', redis-server not on PATH' : ''})`);
  }

  return {
    adminUrl,
    redisUrl,
    ownPostgres,
    ownRedis,
    description: parts.join('; '),
    async stop(keep) {
      for (const s of stops) await s(keep).catch(() => undefined);
    },
  };
}
