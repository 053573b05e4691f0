import type { CommandModule } from 'yargs';
import type { Config, TenantSource } from '../config/types.js';
import { tenantIdFor } from '../policy/tenant.js';
import type { KeyRecord } from '../store/records.js';
import { CliError, type CliIo } from './io.js';
import type { Outcome } from './index.js';
import { storeConfig, type CommonArgs } from './options.js';

/** Between the two DELs of a purged key's cached copy (see purge below). */
const REFILL_SETTLE_MS = 500;

interface KeysArgs extends CommonArgs {
  action: string;
  tenant?: string;
  'tenant-id'?: string;
  key: string;
  route?: string;
  body?: boolean;
  yes?: boolean;
  json?: boolean;
}

/** The stored tenant id: --tenant-id as is, or --tenant mapped by a route's tenant policy. */
function resolveTenantId(config: Config, args: KeysArgs): string {
  if (args['tenant-id'] !== undefined) return args['tenant-id'];
  const carried = args.tenant ?? '';
  const idem = config.routes.filter((r) => r.mode !== 'passthrough');
  let source: TenantSource;
  if (args.route !== undefined) {
    const r = config.routes.find((x) => x.name === args.route);
    if (r === undefined) throw new CliError(`--route ${args.route}: no such route (routes: ${config.routes.map((x) => x.name).join(', ')})`);
    source = r.tenant;
  } else {
    const distinct = new Map(idem.map((r) => [JSON.stringify(r.tenant), r.tenant]));
    if (distinct.size > 1) {
      throw new CliError('--tenant: the routes map tenants differently; name the route with --route NAME, or give the stored id with --tenant-id');
    }
    source = distinct.values().next().value ?? { kind: 'fromHeaderHash', header: 'authorization' };
  }
  return tenantIdFor(source, carried);
}

function describe(rec: KeyRecord, withBody: boolean): Record<string, unknown> {
  return {
    tenantId: rec.tenantId,
    key: rec.key,
    state: rec.expired ? `${rec.state} (expired: acts as absent)` : rec.leaseExpired ? `${rec.state} (lease expired)` : rec.state,
    attempt: rec.attempt,
    onExpiredLease: rec.onExpiredLease,
    route: rec.route,
    request: `${rec.method ?? '?'} ${rec.path ?? '?'}`,
    fingerprint: rec.fingerprint.toString('hex'),
    createdAt: rec.createdAt.toISOString(),
    lockedUntil: rec.lockedUntil?.toISOString() ?? null,
    completedAt: rec.completedAt?.toISOString() ?? null,
    expiresAt: rec.expiresAt.toISOString(),
    status: rec.statusCode,
    responseHeaders: rec.responseHeaders,
    bodyBytes: rec.bodySize,
    bodyRetained: rec.bodyRetained,
    ...(withBody ? { bodyBase64: rec.responseBody?.toString('base64') ?? null } : {}),
  };
}

export function keysCommand(io: CliIo, outcome: Outcome): CommandModule<CommonArgs, KeysArgs> {
  return {
    command: 'keys <action>',
    describe: 'Inspect (show) or remove (purge) one idempotency record - the operator\'s escape hatch',
    builder: (y) => y
      .positional('action', { choices: ['show', 'purge'] as const, describe: 'show | purge', demandOption: true })
      .option('key', { type: 'string', demandOption: true, describe: 'the idempotency key as the client sent it' })
      .option('tenant', { type: 'string', describe: 'the tenant as the request carried it (header value; hashed the same way for fromHeaderHash)' })
      .option('tenant-id', { type: 'string', describe: 'the stored tenant id, as shown by keys show' })
      .option('route', { type: 'string', describe: 'route whose tenant policy maps --tenant (needed when routes differ)' })
      .option('body', { type: 'boolean', default: false, describe: 'show: include the stored response body (base64)' })
      .option('yes', { type: 'boolean', default: false, describe: 'purge: confirm removal' })
      .conflicts('tenant', 'tenant-id')
      .example('$0 keys show --tenant "Bearer sk_live_..." --key order-42 --config proxy.yaml', '')
      .example('$0 keys purge --tenant-id acme --key order-42 --yes', ''),
    handler: async (args) => {
      const config = storeConfig(args, io);
      const tenantId = resolveTenantId(config, args);
      if (args.action === 'purge' && !args.yes) {
        throw new CliError('keys purge removes the record for good: a retry of that key will run the operation again. Add --yes to confirm.');
      }
      const [{ createLogger }, { openDb }, { KeyStore }] = await Promise.all([
        import('../log/logger.js'), import('../store/open.js'), import('../store/key-store.js'),
      ]);
      const db = await openDb(config.store, createLogger('silent'));
      try {
        const store = new KeyStore(db);
        if (args.action === 'show') {
          const rec = await store.get(tenantId, args.key, args.body === true);
          if (rec === null) {
            io.stdout.write(`no record for key ${JSON.stringify(args.key)} under tenant id ${JSON.stringify(tenantId)}\n`);
            outcome.code = 1;
            return;
          }
          io.stdout.write(`${JSON.stringify(describe(rec, args.body === true), null, 2)}\n`);
        } else {
          const state = await store.purge(tenantId, args.key);
          if (state === null) {
            io.stdout.write(`no record for key ${JSON.stringify(args.key)} under tenant id ${JSON.stringify(tenantId)}\n`);
            outcome.code = 1;
            return;
          }
          io.stdout.write(`purged key ${JSON.stringify(args.key)} (was ${state}); the next request with it runs the operation\n`);
          if (config.store.redis !== null) {
            // The cached replay must go too, or Redis would keep answering it.
            const [{ createRedisCache, defaultCachePrefix }, { createMetrics }] = await Promise.all([
              import('../store/redis-cache.js'), import('../metrics/metrics.js'),
            ]);
            const cache = createRedisCache({ url: config.store.redis, prefix: defaultCachePrefix(config.store), commandTimeoutMs: 2000 },
              { metrics: createMetrics({ processMetrics: false }) });
            try {
              // Twice: a replay that read the row before the purge puts the
              // record back into Redis right after answering (the refill);
              // one that was on its way during the first DEL has landed
              // by the second.
              let ok = (await cache.ready(3000)) && (await cache.purge(tenantId, args.key));
              if (ok) {
                await new Promise((r) => setTimeout(r, REFILL_SETTLE_MS));
                ok = await cache.purge(tenantId, args.key);
              }
              io.stdout.write(ok ? 'removed the cached copy from Redis\n'
                : 'warning: Redis could not be reached: a cached copy may still be replayed until its TTL ends (at most 1 h)\n');
              if (!ok) outcome.code = 1;
            } finally {
              await cache.close();
            }
          }
        }
      } finally {
        await db.close();
      }
    },
  };
}
