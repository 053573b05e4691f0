// Brings up the long-lived servers a plan needs. A server that does not start
// (the proxy while it is being written, say) is reported, and the scenarios
// that need it are skipped; the others still run.
import type { ServerHandle } from './children.js';
import type { BenchContext } from './context.js';
import { commitLatency, recreateDatabase } from './pg.js';
import type { Plan } from './plan.js';
import type { ServerId } from './scenarios.js';
import { startBaseline, startProxy, startUpstream } from './servers.js';
import { makeCertificate, type BenchCertificate } from './certificate.js';
import { ensureH2load } from './h2load.js';

export interface Fleet {
  readonly servers: Map<ServerId, ServerHandle>;
  readonly unavailable: Map<ServerId, string>;
  readonly databaseUrl: string | null;
  /** The BENCH_OTHER build's database (otherDatabase), when the plan runs that build. */
  readonly otherDatabaseUrl: string | null;
  readonly commitProbe: { readonly p50: number; readonly p99: number; readonly n: number } | null;
}

const message = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/** The database of the BENCH_OTHER build. */
export const otherDatabase = (opts: { readonly dbName: string }): string => `${opts.dbName}_other`;

export async function bringUp(ctx: BenchContext, plan: Plan): Promise<Fleet> {
  const servers = new Map<ServerId, ServerHandle>();
  const unavailable = new Map<ServerId, string>();
  const upstream = await startUpstream(ctx);
  servers.set('upstream', upstream);
  ctx.log(`upstream ${upstream.url} (pid ${upstream.pid})`);
  if (plan.servers.has('baseline')) {
    const baseline = await startBaseline(ctx, upstream.url);
    servers.set('baseline', baseline);
    ctx.log(`baseline ${baseline.url} (pid ${baseline.pid})`);
  }
  // The TLS and HTTP/2 rows: one certificate for the run, shared by their baselines and their proxy.
  let cert: BenchCertificate | null = null;
  let tlsError: string | null = null;
  const tlsServers: ServerId[] = ['baseline-tls', 'baseline-h2', 'proxy-pg-tls'];
  if (tlsServers.some((id) => plan.servers.has(id))) {
    try {
      cert = makeCertificate(ctx.tmp);
      ctx.log(`TLS: ${cert.description} (${cert.cert})`);
      if (plan.scenarios.some((s) => s.protocol === 'h2')) ensureH2load(ctx.log);
    } catch (err) {
      tlsError = message(err);
      ctx.log(tlsError);
    }
  }
  for (const [id, http2] of [['baseline-tls', false], ['baseline-h2', true]] as const) {
    if (!plan.servers.has(id)) continue;
    if (cert === null || (http2 && tlsError !== null)) {
      unavailable.set(id, tlsError ?? 'no certificate');
      continue;
    }
    const b = await startBaseline(ctx, upstream.url, id, { cert, http2 });
    servers.set(id, b);
    ctx.log(`${id} ${b.url} (pid ${b.pid})`);
  }

  let databaseUrl: string | null = null;
  let dbError: string | null = null;
  let commitProbe: Fleet['commitProbe'] = null;
  if (plan.servers.has('proxy-pg') || plan.servers.has('proxy-pg-tls') || plan.servers.has('proxy-pg-other') || plan.servers.has('proxy-pg-traced') || plan.servers.has('proxy-redis') || plan.rss || plan.pair || plan.tracePairs.length > 0 || plan.buildPairs.length > 0) {
    try {
      databaseUrl = await recreateDatabase(ctx.opts.adminUrl, ctx.opts.dbName);
      ctx.log(`database ${ctx.opts.dbName} created fresh`);
    } catch (err) {
      dbError = `cannot create database ${ctx.opts.dbName}: ${message(err)}`;
    }
  }
  // The other build migrates a database of its own: its schema may be older or newer than this build's.
  let otherUrl: string | null = null;
  if ((plan.servers.has('proxy-pg-other') || plan.buildPairs.length > 0) && databaseUrl !== null) {
    otherUrl = await recreateDatabase(ctx.opts.adminUrl, otherDatabase(ctx.opts)).catch((err: unknown) => {
      dbError = `cannot create database ${otherDatabase(ctx.opts)}: ${message(err)}`;
      return null;
    });
  }
  if (databaseUrl !== null) {
    commitProbe = await commitLatency(databaseUrl, 200).catch(() => null);
    if (commitProbe !== null) ctx.log(`durable single-row commit at 1 client: p50 ${commitProbe.p50} ms, p99 ${commitProbe.p99} ms`);
  }
  // The traced proxy exports to a sink of its own (our upstream server answers 200 to any POST), on the server CPU.
  let otel: NodeJS.ProcessEnv | undefined;
  if (plan.servers.has('proxy-pg-traced')) {
    const sink = await startUpstream(ctx, 'otlp-sink');
    servers.set('otlp-sink', sink);
    otel = tracedEnv(sink.url);
    ctx.log(`otlp sink ${sink.url} (pid ${sink.pid})`);
  }
  const proxies: [ServerId, string | null, string | null][] = [
    ['proxy-pg', databaseUrl, null],
    ['proxy-pg-tls', databaseUrl, null],
    ['proxy-pg-traced', databaseUrl, null],
    ['proxy-redis', databaseUrl, ctx.opts.redisUrl],
    ['proxy-embedded', null, null],
    ['proxy-pg-other', otherUrl, null],
  ];
  for (const [id, db, redis] of proxies) {
    if (!plan.servers.has(id)) continue;
    if (id !== 'proxy-embedded' && db === null) {
      unavailable.set(id, dbError ?? 'no database');
      continue;
    }
    if (id === 'proxy-pg-tls' && cert === null) {
      unavailable.set(id, tlsError ?? 'no certificate');
      continue;
    }
    try {
      const started = Date.now();
      const p = await startProxy(ctx, {
        name: id, upstream: upstream.url, databaseUrl: db, redisUrl: redis,
        ...(id === 'proxy-pg-traced' ? { env: otel } : {}), ...(id === 'proxy-pg-tls' && cert !== null ? { tls: cert } : {}),
        ...(id === 'proxy-pg-other' ? { root: ctx.opts.other! } : {}),
      });
      servers.set(id, p);
      ctx.log(`${id} ${p.url} (pid ${p.pid}, ready in ${((Date.now() - started) / 1000).toFixed(1)} s)`);
    } catch (err) {
      unavailable.set(id, message(err));
      ctx.log(`${id} did not start: ${message(err)}`);
    }
  }
  return { servers, unavailable, databaseUrl, otherDatabaseUrl: otherUrl, commitProbe };
}

/**
 * The traced proxy's environment: spans to `sinkUrl` (the benchmark's upstream program, which answers 200 to
 * any POST), every request sampled unless BENCH_OTEL_SAMPLER / BENCH_OTEL_SAMPLER_ARG say otherwise (e.g.
 * parentbased_traceidratio, 0.1), the proxy's own batches and encoding (4 096 spans, OTLP/protobuf) with a queue
 * large enough that no span is dropped at the benchmark's rate (a dropped span would cost nothing).
 * BENCH_OTEL_PROTOCOL=http/json: the JSON encoding.
 */
export function tracedEnv(sinkUrl: string): NodeJS.ProcessEnv {
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl, OTEL_SERVICE_NAME: 'idempotency-proxy-bench',
    OTEL_TRACES_SAMPLER: process.env.BENCH_OTEL_SAMPLER ?? 'always_on', OTEL_TRACES_SAMPLER_ARG: process.env.BENCH_OTEL_SAMPLER_ARG ?? '',
    OTEL_BSP_MAX_QUEUE_SIZE: '200000',
    ...(process.env.BENCH_OTEL_PROTOCOL === undefined ? {} : { OTEL_EXPORTER_OTLP_PROTOCOL: process.env.BENCH_OTEL_PROTOCOL }),
  };
}
