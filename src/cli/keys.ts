import type { CommandModule } from 'yargs';
import type { Config, TenantSource } from '../config/types.js';
import { tenantIdFor } from '../policy/tenant.js';
import { recordKind, referenceOf, withoutReference } from '../proxy/reference.js';
import type { KeyRecord } from '../store/records.js';
import type { Resolution } from '../admin/keys.js';
import { CliError, type CliIo } from './io.js';
import type { Outcome } from './index.js';
import { storeConfig, type CommonArgs } from './options.js';
import type { ListArgs } from './keys-ops.js';

interface KeysArgs extends CommonArgs, ListArgs {
  action: string;
  tenant?: string;
  'tenant-id'?: string;
  key?: string;
  route?: string;
  body?: boolean;
  yes?: boolean;
  json?: boolean;
  as?: string;
}

/** The stored tenant id: --tenant-id as is, or --tenant mapped by a route's tenant policy. */
export function resolveTenantId(config: Config, args: { tenant?: string; 'tenant-id'?: string; route?: string }): string {
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
    responseHeaders: rec.responseHeaders === null ? null : withoutReference(rec.responseHeaders),
    bodyBytes: rec.bodySize,
    bodyRetained: rec.bodyRetained,
    record: recordKind(rec.bodyRetained, rec.responseHeaders),
    ...(rec.responseHeaders !== null && referenceOf(rec.responseHeaders) !== null ? { reference: referenceOf(rec.responseHeaders) } : {}),
    ...(withBody ? { bodyBase64: rec.responseBody?.toString('base64') ?? null } : {}),
  };
}

export function keysCommand(io: CliIo, outcome: Outcome): CommandModule<CommonArgs, KeysArgs> {
  return {
    command: 'keys <action>',
    describe: 'Inspect (show), remove (purge), list or resolve idempotency records - the operator\'s escape hatch',
    builder: (y) => y
      .positional('action', { choices: ['show', 'purge', 'list', 'resolve'] as const, describe: 'show | purge | list | resolve', demandOption: true })
      .option('key', { type: 'string', describe: 'the idempotency key as the client sent it (show, purge, resolve)' })
      .option('tenant', { type: 'string', describe: 'the tenant as the request carried it (header value; hashed the same way for fromHeaderHash)' })
      .option('tenant-id', { type: 'string', describe: 'the stored tenant id, as shown by keys show' })
      .option('route', { type: 'string', describe: 'route whose tenant policy maps --tenant (needed when routes differ)' })
      .option('body', { type: 'boolean', default: false, describe: 'show: include the stored response body (base64)' })
      .option('yes', { type: 'boolean', default: false, describe: 'purge: confirm removal' })
      .option('as', { type: 'string', choices: ['executed', 'not_executed'], describe: 'resolve: the outcome_unknown key\'s operation ran (executed: it never runs again) or did not (not_executed: the key is freed)' })
      .option('state', { type: 'string', describe: 'list: in_flight | complete | outcome_unknown' })
      .option('older-than', { type: 'string', describe: 'list: created at least this long ago (15m, 2h)' })
      .option('limit', { type: 'string', describe: 'list: keys per page (default 100, at most 1000)' })
      .option('cursor', { type: 'string', describe: 'list: start after this page (the "next" of the previous one)' })
      .option('all', { type: 'boolean', default: false, describe: 'list: follow the pages to the end' })
      .option('json', { type: 'boolean', default: false, describe: 'list: print each page as the admin API\'s JSON ({"keys":[...],"next":...})' })
      .check((a) => {
        if (a.action !== 'list' && (a.key === undefined || a.key === '')) throw new Error('Missing required argument: key');
        if (a.action === 'resolve' && a.as === undefined) throw new Error('Missing required argument: as (executed | not_executed)');
        return true;
      })
      .conflicts('tenant', 'tenant-id')
      .example('$0 keys show --tenant "Bearer sk_live_..." --key order-42 --config proxy.yaml', '')
      .example('$0 keys purge --tenant-id acme --key order-42 --yes', '')
      .example('$0 keys list --state outcome_unknown --older-than 10m --config proxy.yaml', '')
      .example('$0 keys resolve --tenant-id acme --key payout-17 --as not_executed --config proxy.yaml', ''),
    handler: async (args) => {
      const config = storeConfig(args, io);
      // Loaded only when used: the CLI starts fast (src/cli/keys-ops.ts).
      const ops = await import('./keys-ops.js');
      if (args.action === 'list') return ops.listKeys(config, args, io);
      const tenantId = resolveTenantId(config, args);
      const key = args.key!;
      if (args.action === 'purge' && !args.yes) {
        throw new CliError('keys purge removes the record for good: a retry of that key will run the operation again. Add --yes to confirm.');
      }
      const [{ createLogger }, { openDb }, { KeyStore }] = await Promise.all([
        import('../log/logger.js'), import('../store/open.js'), import('../store/key-store.js'),
      ]);
      const db = await openDb(config.store, createLogger('silent'));
      try {
        const store = new KeyStore(db);
        if (args.action === 'resolve') {
          await ops.resolveKey(db, store, config, io, outcome, tenantId, key, args.as as Resolution);
        } else if (args.action === 'show') {
          const rec = await new ops.KeyOperations(db, store).show(tenantId, key, args.body === true);
          if (rec === null) {
            io.stdout.write(`no record for key ${JSON.stringify(key)} under tenant id ${JSON.stringify(tenantId)}\n`);
            outcome.code = 1;
            return;
          }
          io.stdout.write(`${JSON.stringify(describe(rec, args.body === true), null, 2)}\n`);
        } else {
          const state = await new ops.KeyOperations(db, store).purge(tenantId, key);
          if (state === null) {
            io.stdout.write(`no record for key ${JSON.stringify(key)} under tenant id ${JSON.stringify(tenantId)}\n`);
            outcome.code = 1;
            return;
          }
          io.stdout.write(`purged key ${JSON.stringify(key)} (was ${state}); the next request with it runs the operation\n`);
          if (!(await ops.dropCachedCopy(config, io, tenantId, key))) outcome.code = 1;
        }
      } finally {
        await db.close();
      }
    },
  };
}

