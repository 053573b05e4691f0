import { userInfo } from 'node:os';
import { KeyNotFoundError, KeyOperations, NotOutcomeUnknownError, type KeyView, type Resolution } from '../admin/keys.js';
import { AdminInputError, parseListQuery, type ListField, type ListParams } from '../admin/query.js';
import type { Config } from '../config/types.js';
import { createLogger, keyHash } from '../log/logger.js';
import type { Db } from '../store/db/port.js';
import { KeyStore } from '../store/key-store.js';
import { openDb } from '../store/open.js';
import { CliError, type CliIo } from './io.js';
import type { Outcome } from './index.js';
import { resolveTenantId } from './keys.js';

// keys list and keys resolve (and the Redis side of purge): the CLI's front
// door to the operations of src/admin/keys.ts, which the admin API shares.

export { KeyOperations };

/** Between the two DELs of a purged key's cached copy. */
const REFILL_SETTLE_MS = 500;

export interface ListArgs {
  state?: string;
  'older-than'?: string;
  limit?: string;
  cursor?: string;
  all?: boolean;
}

/** The CLI flag for each field of the listing. */
const FLAG: Record<ListField, string> = {
  state: '--state', route: '--route', tenantId: '--tenant-id', olderThan: '--older-than', limit: '--limit', cursor: '--cursor', body: '--body',
};

type ListCliArgs = ListArgs & { tenant?: string; 'tenant-id'?: string; route?: string; body?: boolean; json?: boolean };

function age(iso: string, now: number): string {
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  return s < 120 ? `${s}s` : s < 7200 ? `${Math.round(s / 60)}m` : s < 172800 ? `${Math.round(s / 3600)}h` : `${Math.round(s / 86400)}d`;
}

function line(k: KeyView, now: number): string {
  return [k.state.padEnd(15), age(k.createdAt, now).padStart(5), (k.route ?? '-').padEnd(16), JSON.stringify(k.tenantId), JSON.stringify(k.key),
    `${k.method ?? '?'} ${k.path ?? '?'}`, k.status === null ? '' : String(k.status)].join('  ').trimEnd();
}

/**
 * keys list: one page (or, with --all, every page) of keys. Text lines by
 * default, the admin API's JSON page with --json (one per page).
 */
export async function listKeys(config: Config, args: ListCliArgs, io: CliIo): Promise<void> {
  const tenantGiven = args.tenant !== undefined || args['tenant-id'] !== undefined;
  const params: ListParams = {
    state: args.state, route: args.route, olderThan: args['older-than'], limit: args.limit, cursor: args.cursor,
    tenantId: tenantGiven ? resolveTenantId(config, args) : undefined,
    body: args.body === true ? 'true' : undefined,
  };
  let q;
  try {
    q = parseListQuery(params);
  } catch (err) {
    if (err instanceof AdminInputError) throw new CliError(`${FLAG[err.field as ListField] ?? err.field}: ${err.reason}`);
    throw err;
  }
  const db = await openDb(config.store, createLogger('silent'));
  try {
    const ops = new KeyOperations(db, new KeyStore(db));
    let cursor = q.cursor;
    let total = 0;
    for (;;) {
      let page;
      try {
        page = await ops.list({ ...q, cursor });
      } catch (err) {
        if (err instanceof AdminInputError) throw new CliError(`${FLAG[err.field as ListField] ?? err.field}: ${err.reason}`);
        throw err;
      }
      total += page.keys.length;
      if (args.json === true) io.stdout.write(`${JSON.stringify(page)}\n`);
      else {
        const now = Date.now();
        for (const k of page.keys) io.stdout.write(`${line(k, now)}\n`);
      }
      if (page.next === null) break;
      if (args.all !== true) {
        if (args.json !== true) io.stdout.write(`more: add --cursor ${page.next} (or --all)\n`);
        break;
      }
      cursor = parseListQuery({ ...params, cursor: page.next }).cursor;
    }
    if (args.json !== true && args.all === true) io.stdout.write(`${total} key(s)\n`);
  } finally {
    await db.close();
  }
}

/**
 * With store.redis: deletes the key's cached copy, or Redis would keep
 * answering it. False (and a warning) when Redis could not be reached.
 */
export async function dropCachedCopy(config: Config, io: CliIo, tenantId: string, key: string): Promise<boolean> {
  if (config.store.redis === null) return true;
  const [{ createRedisCache, defaultCachePrefix }, { createMetrics }] = await Promise.all([
    import('../store/redis-cache.js'), import('../metrics/metrics.js'),
  ]);
  const cache = createRedisCache({ url: config.store.redis, prefix: defaultCachePrefix(config.store), commandTimeoutMs: 2000 },
    { metrics: createMetrics({ processMetrics: false }) });
  try {
    // Twice: a replay that read the row before the purge puts the record
    // back into Redis right after answering (the refill); one that was on
    // its way during the first DEL has landed by the second.
    let ok = (await cache.ready(3000)) && (await cache.purge(tenantId, key));
    if (ok) {
      await new Promise((r) => setTimeout(r, REFILL_SETTLE_MS));
      ok = await cache.purge(tenantId, key);
    }
    io.stdout.write(ok ? 'removed the cached copy from Redis\n'
      : 'warning: Redis could not be reached: a cached copy may still be replayed until its TTL ends (at most 1 h)\n');
    return ok;
  } finally {
    await cache.close();
  }
}

/** keys resolve: the shared operation (src/admin/keys.ts), one audit line on stderr. */
export async function resolveKey(db: Db, store: KeyStore, config: Config, io: CliIo, outcome: Outcome,
  tenantId: string, key: string, as: Resolution): Promise<void> {
  const audit = (result: string): void => {
    io.stderr.write(`${JSON.stringify({ admin: 'keys', op: 'resolve', who: { user: userInfo().username, via: 'cli' }, tenantId, key: keyHash(tenantId, key), as, result, time: new Date().toISOString() })}\n`);
  };
  try {
    await new KeyOperations(db, store).resolve(tenantId, key, as);
  } catch (err) {
    audit((err as Error).message);
    if (err instanceof KeyNotFoundError) {
      io.stdout.write(`no record for key ${JSON.stringify(key)} under tenant id ${JSON.stringify(tenantId)} (or it expired and acts as absent)\n`);
      outcome.code = 1;
      return;
    }
    if (err instanceof NotOutcomeUnknownError) throw new CliError(`keys resolve: ${err.message}`, 1);
    throw err;
  }
  audit('resolved');
  io.stdout.write(as === 'executed'
    ? `resolved key ${JSON.stringify(key)} as executed: it is complete now, every retry replays "operation executed; its response was not recorded" and the operation never runs again\n`
    : `resolved key ${JSON.stringify(key)} as not executed: the key is free, the next request with it runs the operation\n`);
  if (!(await dropCachedCopy(config, io, tenantId, key))) outcome.code = 1;
}
