import { Pool, buildConnector, type Dispatcher } from 'undici';
import type { UpstreamConfig, UpstreamTls } from '../config/types.js';
import { tlsReloader, type TlsReloader } from '../ops/tls-reload.js';
import { readUpstreamTls } from '../config/tls-files.js';
import { TimeoutSignal, UpstreamError } from '../errors.js';
import type { PoolCounts } from '../metrics/metrics.js';
import { MAX_HEADER_BYTES } from '../http/framing.js';

export { TimeoutSignal, UpstreamError };
export type { FailureKind } from '../errors.js';

// The upstream: one undici keep-alive pool, and failures classified by *when*
// they happened, because that decides the key's fate (STYLE habit 6):
//   not_sent  — the request never reached the upstream: release the key;
//   unknown   — sent, no complete answer (timeout, reset): policy decides;
//   responded — status and headers arrived (body read separately).

const NOT_SENT = new Set([
  'ECONNREFUSED', 'UND_ERR_CONNECT_TIMEOUT', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL',
  // undici refused to build the request: not a byte was sent.
  'UND_ERR_INVALID_ARG', 'UND_ERR_NOT_SUPPORTED',
]);
const TIMEOUTS = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);
/**
 * The TLS handshake with the upstream failed (its certificate did not verify,
 * or it refused ours with an alert): the upstream never read a request.
 */
const TLS_HANDSHAKE = /^(ERR_TLS_CERT_ALTNAME_INVALID|UNABLE_TO_|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|CERT_|ERR_SSL_.*ALERT_|ERR_SSL_WRONG_VERSION_NUMBER$)/;

export function classify(err: unknown): UpstreamError {
  if (err instanceof UpstreamError) return err;
  const e = err as { code?: string; message?: string; cause?: { code?: string } };
  const code = e?.code ?? e?.cause?.code;
  if (err instanceof TimeoutSignal) return new UpstreamError('timeout', err.message, { cause: err });
  if (code !== undefined && (NOT_SENT.has(code) || TLS_HANDSHAKE.test(code))) return new UpstreamError('not_sent', `upstream unreachable (${code})`, { cause: err });
  if (code !== undefined && TIMEOUTS.has(code)) return new UpstreamError('timeout', `upstream timed out (${code})`, { cause: err });
  // The upstream answered, but with something the proxy cannot read: its handler ran, so the outcome is as unknown as after a reset.
  if (code === 'UND_ERR_HEADERS_OVERFLOW') {
    return new UpstreamError('reset', `the upstream's response header section is larger than the ${MAX_HEADER_BYTES} bytes the proxy reads (${code})`, { cause: err });
  }
  if ((err as Error | null)?.name === 'HTTPParserError') {
    return new UpstreamError('reset', `the upstream's response is not valid HTTP/1.1 (${e.message ?? code})`, { cause: err });
  }
  return new UpstreamError('reset', `upstream connection failed after the request was sent (${code ?? e?.message ?? 'unknown error'})`, { cause: err });
}

/**
 * upstream.timeout ran out while the request waited for a connection to the upstream (every one busy, or its
 * own still opening): not a byte of it was sent. When a connection comes, the request is dropped unsent
 * (droppedUnsent): its dispatch handler aborts it in onConnect, which undici calls right before writing.
 */
export function noConnectionInTime(timeoutMs: number): UpstreamError {
  return new UpstreamError('not_sent', `no connection to the upstream became free within upstream.timeout (${timeoutMs} ms): the request was not sent`);
}

/**
 * upstream.timeout ran out for a dispatch: cuts it off (TimeoutSignal) when it was written (`abort`, from
 * onConnect, is set) and says so; false: it never was, and never will be (noConnectionInTime).
 */
export function cutOff(abort: ((err?: Error) => void) | null, timeoutMs: number): boolean {
  if (abort === null) return false;
  abort(new TimeoutSignal(timeoutMs));
  return true;
}

/** The abort of a request answered already (noConnectionInTime) once undici has a connection for it. */
export function droppedUnsent(): UpstreamError {
  return new UpstreamError('not_sent', 'dropped unsent: upstream.timeout ran out while it waited for a connection');
}

export interface Upstream {
  readonly pool: Dispatcher;
  readonly origin: string;
  readonly timeoutMs: number;
  /** Connections open and idle, and requests waiting for one (the idempotency_proxy_upstream_* gauges). */
  counts(): PoolCounts;
  /** SIGHUP: upstream.tls read again; new connections use it, open ones keep theirs (src/ops/tls-reload.ts). */
  readonly tls: TlsReloader<UpstreamTls>;
  close(): Promise<void>;
}

export function createUpstream(cfg: UpstreamConfig): Upstream {
  const origin = new URL(cfg.url).origin;
  const timeout = Math.min(cfg.timeoutMs, 10_000);
  // upstream.tls: CA bundle, client certificate, SNI name (docs/configuration.md, Upstream), in a
  // connector that SIGHUP can replace; without it undici's own, built from the options.
  const material = cfg.tls === null ? null : readUpstreamTls(cfg.tls);
  let connector = material === null ? null : buildConnector({ timeout, ...material });
  const pool = new Pool(origin, {
    connections: cfg.connections,
    pipelining: 1,
    // upstream.keepAliveTimeout, where set, bounds an idle connection's life whatever the upstream's hint says
    // (docs/configuration.md); unset, undici's defaults: 4 s without a hint, the hint less 2 s with one.
    keepAliveTimeout: cfg.keepAliveTimeoutMs ?? 4_000,
    keepAliveMaxTimeout: cfg.keepAliveTimeoutMs ?? 600_000,
    // An upstream's response header section may be as large as a request's the proxy accepts (src/http/framing.ts).
    maxHeaderSize: MAX_HEADER_BYTES,
    headersTimeout: cfg.timeoutMs,
    bodyTimeout: cfg.timeoutMs,
    connect: connector === null ? { timeout } : (opts, cb) => connector!(opts, cb),
  });
  const tls = tlsReloader(readUpstreamTls, (m) => { connector = buildConnector({ timeout, ...m }); }, material);
  return {
    pool,
    origin,
    timeoutMs: cfg.timeoutMs,
    counts: () => pool.stats,
    tls,
    close: () => pool.close(),
  };
}
