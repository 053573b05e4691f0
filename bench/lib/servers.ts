// Starting the servers under test, each pinned to the server CPU: our
// upstream, the baseline, and the proxy through its own CLI, exactly as the
// Docker image starts it (node's options from src/node-flags.ts, which the
// baseline gets as well).
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parse, stringify } from 'yaml';
import type { BenchCertificate } from './certificate.js';
import { NODE_FLAGS } from '../../src/node-flags.js';
import type { ServerHandle } from './children.js';
import type { BenchContext } from './context.js';

export const SERVER_CPU = 0;
export const LOAD_CPU = 1;

/** Our own servers (upstream, baseline) print {"port":N,"url":"http://127.0.0.1:N"} once they listen. */
export function upstreamReady(line: string): string | null {
  try {
    const msg = JSON.parse(line) as { url?: unknown; port?: unknown };
    return typeof msg.url === 'string' && typeof msg.port === 'number' ? msg.url : null;
  } catch {
    return null;
  }
}

/** The proxy logs a pino line {"msg":"proxy listening","url":"http://127.0.0.1:N"} once it accepts requests. */
export function proxyReady(line: string): string | null {
  if (!line.includes('proxy listening')) return null;
  try {
    const msg = JSON.parse(line) as { msg?: unknown; url?: unknown };
    return msg.msg === 'proxy listening' && typeof msg.url === 'string' ? msg.url : null;
  } catch {
    return null;
  }
}

/** `upstream.connections` of bench/proxy.yaml: the baseline's pool gets the same size. */
export function proxyPoolSize(ctx: BenchContext): number {
  const doc = parse(readFileSync(join(ctx.projectRoot, 'bench', 'proxy.yaml'), 'utf8')) as { upstream?: { connections?: unknown } };
  const n = doc.upstream?.connections;
  return typeof n === 'number' && Number.isInteger(n) && n > 0 ? n : 128;
}

export function startUpstream(ctx: BenchContext, name = 'upstream'): Promise<ServerHandle> {
  return ctx.children.start({
    name,
    command: [...ctx.pin.prefix(SERVER_CPU), process.execPath, join(ctx.distRoot, 'bench', 'upstream.js'), '--port', '0'],
    logFile: join(ctx.tmp, `${name}.log`),
    env: process.env,
    cwd: ctx.projectRoot,
    timeoutMs: 15_000,
    ready: upstreamReady,
  });
}

/** `tls`: the baseline terminates TLS with the run's certificate; `http2` as well: HTTP/2 over TLS. */
export function startBaseline(ctx: BenchContext, upstream: string, name = 'baseline', tls: { cert: BenchCertificate; http2: boolean } | null = null): Promise<ServerHandle> {
  const script = join(ctx.distRoot, 'bench', 'baseline.js');
  const args = ['--port', '0', '--upstream', upstream, '--connections', String(proxyPoolSize(ctx))];
  if (tls !== null) args.push('--tls-cert', tls.cert.cert, '--tls-key', tls.cert.key, ...(tls.http2 ? ['--http2'] : []));
  return ctx.children.start({
    name,
    // The proxy's node options too (src/node-flags.ts): both are measured with the same runtime.
    command: [...ctx.pin.prefix(SERVER_CPU), process.execPath, ...NODE_FLAGS, script, ...args],
    logFile: join(ctx.tmp, `${name}.log`),
    env: process.env,
    cwd: ctx.projectRoot,
    timeoutMs: 15_000,
    ready: upstreamReady,
  });
}

export interface ProxyOptions {
  readonly name: string;
  readonly upstream: string;
  readonly databaseUrl: string | null; // null: embedded store (bench/proxy-embedded.yaml)
  readonly redisUrl: string | null;
  /** Extra environment (the traced proxy's OTEL_* variables). */
  readonly env?: NodeJS.ProcessEnv;
  /** TLS and HTTP/2 on the listener with this certificate (bench/proxy.yaml with listen.tls and listen.http2 added). */
  readonly tls?: BenchCertificate;
  /** Another checkout's root (BENCH_OTHER): its dist/src/main.js and its bench/proxy.yaml. */
  readonly root?: string;
}

/** bench/proxy.yaml as it is, with `listen: { address, tls, http2: true }`: one file of routes for every proxy of the run. */
function tlsConfig(ctx: BenchContext, cert: BenchCertificate): string {
  const doc = parse(readFileSync(join(ctx.projectRoot, 'bench', 'proxy.yaml'), 'utf8')) as Record<string, unknown>;
  doc['listen'] = { address: '127.0.0.1:0', tls: { cert: cert.cert, key: cert.key }, http2: true };
  const file = join(ctx.tmp, 'proxy-tls.yaml');
  writeFileSync(file, stringify(doc));
  return file;
}

/** BENCH_PROXY_PROFILE: a CPU profile of each proxy, written when the run stops it. */
const profileFlags = (ctx: BenchContext, name: string): string[] =>
  ctx.opts.proxyProfileDir === null ? [] : ['--cpu-prof', `--cpu-prof-dir=${join(ctx.opts.proxyProfileDir, name)}`];

/**
 * The node options a build's proxy starts with: this build's NODE_FLAGS, or another checkout's own (its
 * dist/src/node-flags.js), so that a build pair of two builds whose flags differ measures each as its image
 * would start it. A checkout without the file predates the proxy's own options: none.
 */
export async function nodeFlagsOf(root: string | undefined): Promise<readonly string[]> {
  if (root === undefined) return NODE_FLAGS;
  const file = join(root, 'dist', 'src', 'node-flags.js');
  if (!existsSync(file)) return []; // a build from before the proxy had node options of its own
  const mod = (await import(pathToFileURL(file).href).catch((err: unknown) => {
    throw new Error(`BENCH_OTHER's node flags could not be read from ${file} (${(err as Error).message}); build that checkout first`);
  })) as { NODE_FLAGS?: unknown };
  const flags = mod.NODE_FLAGS;
  if (!Array.isArray(flags) || !flags.every((f) => typeof f === 'string')) throw new Error(`${file}: NODE_FLAGS is not a list of options`);
  return flags as string[];
}

export async function startProxy(ctx: BenchContext, p: ProxyOptions): Promise<ServerHandle> {
  const flags = await nodeFlagsOf(p.root);
  const config = p.tls !== undefined ? tlsConfig(ctx, p.tls) : join(p.root ?? ctx.projectRoot, 'bench', p.databaseUrl === null ? 'proxy-embedded.yaml' : 'proxy.yaml');
  const main = p.root === undefined ? join(ctx.distRoot, 'src', 'main.js') : join(p.root, 'dist', 'src', 'main.js');
  const args = ['serve', '--config', config, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0'];
  if (p.databaseUrl !== null) args.push('--database-url', p.databaseUrl);
  if (p.redisUrl !== null) args.push('--redis-url', p.redisUrl);
  const env: NodeJS.ProcessEnv = { ...process.env, ...p.env, BENCH_UPSTREAM_URL: p.upstream };
  delete env['DATABASE_URL']; // flags and the YAML decide, not the caller's shell
  delete env['REDIS_URL'];
  if (p.databaseUrl === null) env['BENCH_DATA_DIR'] = mkdtempSync(join(ctx.tmp, `${p.name}-data-`));
  return ctx.children.start({
    name: p.name,
    // As the Docker image's ENTRYPOINT starts it: node NODE_FLAGS dist/src/main.js (the other build: its own flags).
    command: [...ctx.pin.prefix(SERVER_CPU), process.execPath, ...flags, ...profileFlags(ctx, p.name), main, ...args],
    logFile: join(ctx.tmp, `${p.name}.log`),
    env,
    cwd: ctx.projectRoot,
    timeoutMs: p.databaseUrl === null ? 120_000 : 60_000,
    ready: proxyReady,
  });
}
