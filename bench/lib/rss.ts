// Peak RSS with many open connections: a fresh server, N keep-alive sockets
// opened by N simultaneous requests, a second round on the same sockets, then
// VmHWM (peak) and VmRSS read from /proc while every socket is still open.
import type { ServerHandle } from './children.js';
import { REQUEST_BODY, type BenchContext } from './context.js';
import { readMemory, type MemoryFigures } from './proc.js';
import type { RssOpenReport } from './types.js';

export interface RssMeasure {
  readonly server: string;
  readonly isProxy: boolean;
  readonly sockets: number;
  readonly idle: MemoryFigures | null; // after start, before the connections
  readonly open: MemoryFigures | null; // with every socket open, after two rounds
  readonly report: RssOpenReport | null;
  readonly error: string | null;
}

export const RSS_LIMIT_MIB = 150;

/** `name` labels the table row; `slug` (visible ASCII, no spaces) goes into the Idempotency-Keys. */
export async function measureRss(ctx: BenchContext, name: string, slug: string, start: () => Promise<ServerHandle>): Promise<RssMeasure> {
  const sockets = ctx.opts.rssSockets;
  let handle: ServerHandle | null = null;
  try {
    handle = await start();
    await new Promise((r) => setTimeout(r, 1_000));
    const idle = readMemory(handle.pid);
    const held = await ctx.load.openConnections({
      mode: 'rss',
      origin: handle.url,
      path: '/bench/rss',
      sockets,
      keyPrefix: `${ctx.runId}-rss-${slug}`,
      body: REQUEST_BODY,
    });
    const open = readMemory(handle.pid);
    await held.close();
    return { server: name, isProxy: slug.startsWith('proxy'), sockets, idle, open, report: held.report, error: null };
  } catch (err) {
    return { server: name, isProxy: slug.startsWith('proxy'), sockets, idle: null, open: null, report: null, error: err instanceof Error ? err.message : String(err) };
  } finally {
    await handle?.stop();
  }
}

/** The figure only counts if every request on every socket got a 2xx. */
export function rssValid(m: RssMeasure): boolean {
  return m.report !== null && m.report.rounds.every((r) => r.errors === 0 && Object.keys(r.status).every((code) => code.startsWith('2')));
}

/** A fresh proxy (PostgreSQL + Redis) and a fresh baseline, one after the other. */
export async function measureRssPair(
  ctx: BenchContext,
  startProxy: (() => Promise<ServerHandle>) | string, // a reason instead when the proxy cannot run
  startBaseline: () => Promise<ServerHandle>,
): Promise<RssMeasure[]> {
  const proxy = await measureRss(ctx, 'proxy (PostgreSQL + Redis)', 'proxy', () =>
    typeof startProxy === 'string' ? Promise.reject(new Error(startProxy)) : startProxy(),
  );
  const baseline = await measureRss(ctx, 'baseline', 'baseline', startBaseline);
  for (const m of [proxy, baseline]) {
    ctx.log(`rss ${m.server}: ${m.error ?? `idle ${m.idle?.rssMiB} MiB, peak ${m.open?.hwmMiB} MiB, now ${m.open?.rssMiB} MiB`}`);
  }
  return [proxy, baseline];
}
