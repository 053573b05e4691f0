// A throwaway Citus cluster on this machine: one coordinator and two workers,
// each its own initdb in a temp directory, on free loopback ports, with
// shared_preload_libraries = citus. Used by `npm run test:citus`
// (tools/test-citus.ts) and by the Citus benchmark (docs/scale.md).
// The PostgreSQL binaries come from CITUS_PG_BIN (the bin directory of a
// PostgreSQL that has the citus extension installed).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, appendFileSync, chownSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort } from './local-servers.js';

export const HOW_TO_GET_CITUS =
  'set CITUS_PG_BIN to the bin directory of a PostgreSQL with the citus extension installed, ' +
  'e.g. CITUS_PG_BIN=/usr/lib/postgresql/15/bin. Citus is not in Debian or on npm: build it from source ' +
  '(github.com/citusdata/citus, tag v13.0.5 for PostgreSQL 15; apt-get install postgresql-server-dev-15 ' +
  'liblz4-dev libzstd-dev libkrb5-dev libssl-dev libselinux1-dev libxslt1-dev libpam0g-dev libreadline-dev; ' +
  'then ./configure && make -j2 && make install) — see docs/scale.md';

export interface CitusCluster {
  /** postgres://… of the coordinator, database `postgres`. */
  readonly url: string;
  readonly ports: readonly number[];
  /** Creates a database on every node with the extension and the workers registered. */
  createDatabase(name: string): Promise<string>;
  dropDatabase(name: string): Promise<void>;
  stop(): Promise<void>;
}

interface Node { dir: string; port: number }

function runAsPostgres(cmd: string, args: string[]): { status: number | null; out: string } {
  // initdb refuses to run as root: run it as the postgres user when we are root.
  const asRoot = process.getuid?.() === 0;
  const r = asRoot
    ? spawnSync('runuser', ['-u', 'postgres', '--', cmd, ...args], { encoding: 'utf8' })
    : spawnSync(cmd, args, { encoding: 'utf8' });
  return { status: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
}

function uidOf(user: string): number | null {
  const r = spawnSync('id', ['-u', user], { encoding: 'utf8' });
  return r.status === 0 ? Number(r.stdout.trim()) : null;
}

export function citusBinDir(): string {
  const bin = process.env.CITUS_PG_BIN;
  if (!bin) throw new Error(`CITUS_PG_BIN is not set: ${HOW_TO_GET_CITUS}`);
  if (!existsSync(path.join(bin, 'initdb'))) throw new Error(`CITUS_PG_BIN=${bin} has no initdb: ${HOW_TO_GET_CITUS}`);
  return bin;
}

async function initNode(bin: string, root: string, name: string): Promise<Node> {
  const dir = path.join(root, name);
  const port = await freePort();
  const init = runAsPostgres(path.join(bin, 'initdb'), ['-D', dir, '-A', 'trust', '-U', 'postgres', '--no-sync']);
  if (init.status !== 0) throw new Error(`initdb ${dir} failed: ${init.out}`);
  appendFileSync(path.join(dir, 'postgresql.conf'), [
    `port = ${port}`, "listen_addresses = '127.0.0.1'", `unix_socket_directories = '${root}'`,
    "shared_preload_libraries = 'citus'", 'citus.enable_statistics_collection = off',
    // Durability off unless CITUS_FSYNC=on (the benchmark's durable run).
    'max_connections = 300', ...(process.env.CITUS_FSYNC === 'on' ? [] : ['fsync = off', 'synchronous_commit = off', 'full_page_writes = off']),
    'shared_buffers = 64MB', 'max_prepared_transactions = 100', '',
  ].join('\n'));
  return { dir, port };
}

function pgCtl(bin: string, args: string[]): void {
  const r = runAsPostgres(path.join(bin, 'pg_ctl'), args);
  if (r.status !== 0) throw new Error(`pg_ctl ${args.join(' ')} failed: ${r.out}`);
}

async function onNode<T>(port: number, db: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', database: db });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** Starts a coordinator and two workers; stop() stops them and removes their directories. */
export async function startCitusCluster(): Promise<CitusCluster> {
  const bin = citusBinDir();
  const root = mkdtempSync(path.join(tmpdir(), 'idem-citus-'));
  const pgUid = process.getuid?.() === 0 ? uidOf('postgres') : null;
  if (pgUid !== null) chownSync(root, pgUid, pgUid);
  const nodes: Node[] = [];
  const stop = async (): Promise<void> => {
    for (const n of nodes) {
      try { pgCtl(bin, ['stop', '-D', n.dir, '-m', 'immediate', '-w']); } catch { /* already down */ }
    }
    rmSync(root, { recursive: true, force: true });
  };
  try {
    for (const name of ['coordinator', 'worker1', 'worker2']) nodes.push(await initNode(bin, root, name));
    for (const n of nodes) {
      pgCtl(bin, ['start', '-D', n.dir, '-l', `${n.dir}.log`, '-w', '-t', '60']);
    }
  } catch (err) {
    await stop();
    throw err;
  }
  const [coord, ...workers] = nodes as [Node, ...Node[]];
  const createDatabase = async (name: string): Promise<string> => {
    for (const n of nodes) {
      await onNode(n.port, 'postgres', async (c) => {
        if (name !== 'postgres') await c.query(`CREATE DATABASE ${name}`);
      });
      await onNode(n.port, name, (c) => c.query('CREATE EXTENSION IF NOT EXISTS citus'));
    }
    await onNode(coord.port, name, async (c) => {
      await c.query('SELECT citus_set_coordinator_host($1, $2)', ['127.0.0.1', coord.port]);
      for (const w of workers) await c.query('SELECT citus_add_node($1, $2)', ['127.0.0.1', w.port]);
    });
    return `postgres://postgres@127.0.0.1:${coord.port}/${name}`;
  };
  const dropDatabase = async (name: string): Promise<void> => {
    for (const n of nodes) {
      await onNode(n.port, 'postgres', (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    }
  };
  try {
    await createDatabase('postgres');
  } catch (err) {
    await stop();
    throw err;
  }
  return { url: `postgres://postgres@127.0.0.1:${coord.port}/postgres`, ports: nodes.map((n) => n.port), createDatabase, dropDatabase, stop };
}
