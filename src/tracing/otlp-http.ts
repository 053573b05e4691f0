import { readFileSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { promisify } from 'node:util';
import { gzip as gzipCallback } from 'node:zlib';
import { OTLPExporterError, type ExportResponse, type IExporterTransport } from '@opentelemetry/otlp-exporter-base';
import { Pool, type Dispatcher } from 'undici';
import { parseRetryAfter } from '../client/retry-after.js';

// How export requests travel: OTLP/HTTP POSTs sent with undici, the HTTP
// client the proxy already runs for its upstream, not node:http. Node's HTTP
// client and server share their message and stream code (OutgoingMessage,
// IncomingMessage, Readable); an exporter sending with node:http passes its
// own objects through the functions that serve every proxied request, and
// their inline caches, seeing more object shapes than they hold, go
// megamorphic. Each export here is an undici dispatch whose handler
// collects the answer, as the proxy's upstream calls are: nothing of the
// exporter's passes through node's http or stream functions (measured: about
// 1–2 % of a traced new key, nothing visible on replays; docs/tracing-cost.md).
// Everything else about an export —
// endpoint, headers, timeout, compression and their OTEL_EXPORTER_OTLP_*
// variables, the response's reading, the concurrency limit — stays
// OpenTelemetry's (src/tracing/start.ts); this module is only the wire, with
// the retry policy of OpenTelemetry's exporters.

/** What OpenTelemetry's HTTP configuration resolved, and the TLS files this transport reads itself. */
export interface OtlpHttpOptions {
  /** The whole URL requests go to: the endpoint and /v1/traces. */
  readonly url: string;
  /** Headers of every request: Content-Type and OTEL_EXPORTER_OTLP_[TRACES_]HEADERS. */
  readonly headers: () => Promise<Record<string, string>>;
  readonly compression: 'gzip' | 'none';
  /** Put before our own User-Agent, as OpenTelemetry's exporters do. */
  readonly userAgent?: string | undefined;
  readonly tls: OtlpTls;
  /** Connections to the collector at most: the recorder's exports in flight. */
  readonly connections: number;
  /** The proxy's version, for the User-Agent. */
  readonly version: string;
}

export interface OtlpTls {
  readonly ca?: Buffer;
  readonly cert?: Buffer;
  readonly key?: Buffer;
}

/** A response body larger than this is not read: the export failed (OpenTelemetry's exporters' limit). */
const MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

/** Collector answers worth another attempt (the OTLP specification's list). */
const RETRYABLE_STATUS = new Set([429, 502, 503, 504]);

/** Failures to reach the collector that another attempt may get past. */
const RETRYABLE_ERRORS = new Set([
  'ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'EAI_AGAIN', 'ENOTFOUND', 'ENETUNREACH', 'EHOSTUNREACH',
  'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT',
]);

const gzip = promisify(gzipCallback);

const TIMED_OUT = 'the collector did not answer within the export timeout';

/**
 * The CA, client certificate and client key files named by the standard variables (the signal's own first:
 * OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE, then OTEL_EXPORTER_OTLP_CERTIFICATE; the same for CLIENT_CERTIFICATE and
 * CLIENT_KEY), read once at start. A file that cannot be read stops the start with the variable's name, where
 * OpenTelemetry's exporters would warn and send without it.
 */
export function tlsFromEnv(env: NodeJS.ProcessEnv): OtlpTls {
  const read = (name: string): Buffer | undefined => {
    const specific = env[`OTEL_EXPORTER_OTLP_TRACES_${name}`]?.trim();
    const general = env[`OTEL_EXPORTER_OTLP_${name}`]?.trim();
    const [variable, path] = specific ? [`OTEL_EXPORTER_OTLP_TRACES_${name}`, specific] : [`OTEL_EXPORTER_OTLP_${name}`, general];
    if (!path) return undefined;
    try {
      return readFileSync(resolvePath(path));
    } catch (e) {
      throw new Error(`${variable}=${path}: cannot be read (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
    }
  };
  const ca = read('CERTIFICATE');
  const cert = read('CLIENT_CERTIFICATE');
  const key = read('CLIENT_KEY');
  if ((cert === undefined) !== (key === undefined)) {
    throw new Error('OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY (or their TRACES_ forms): set both or neither');
  }
  return { ...(ca && { ca }), ...(cert && { cert }), ...(key && { key }) };
}

/** One attempt per send: POSTs the request body, maps the collector's answer the way OpenTelemetry's exporters do. */
export class UndiciOtlpTransport implements IExporterTransport {
  private readonly pool: Pool;
  private readonly path: string;
  private readonly userAgent: string;
  private readonly authorization: string | null;

  constructor(private readonly options: OtlpHttpOptions) {
    const url = new URL(options.url);
    this.path = `${url.pathname}${url.search}`;
    const own = `idempotency-proxy/${options.version}`;
    this.userAgent = options.userAgent ? `${options.userAgent} ${own}` : own;
    // Credentials in the endpoint's URL (https://user:secret@collector/…) as node:http would send them: Basic auth.
    this.authorization = url.username === '' && url.password === '' ? null
      : `Basic ${Buffer.from(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`).toString('base64')}`;
    const tls = options.tls;
    this.pool = new Pool(url.origin, {
      connections: options.connections,
      ...(url.protocol === 'https:' && (tls.ca || tls.cert) ? { connect: { ...tls } } : {}),
    });
  }

  async send(data: Uint8Array, timeoutMillis: number): Promise<ExportResponse> {
    const headers: Record<string, string> = { ...(await this.options.headers()), 'user-agent': this.userAgent };
    if (this.authorization !== null && !Object.keys(headers).some((h) => h.toLowerCase() === 'authorization')) headers['authorization'] = this.authorization;
    let body: Uint8Array = data;
    if (this.options.compression === 'gzip') {
      body = await gzip(data);
      headers['content-encoding'] = 'gzip';
    }
    return new Promise<ExportResponse>((resolve) => {
      const handler = new ExportHandler(resolve, timeoutMillis);
      try {
        this.pool.dispatch({ method: 'POST', path: this.path, headers, body }, handler);
      } catch (error) {
        handler.onError(error as Error);
      }
    });
  }

  shutdown(): void {
    void this.pool.close();
  }
}

/**
 * One export's exchange, as an undici dispatch handler (the proxy's upstream calls are made the same way): the
 * answer is collected here, not through a response stream, so no stream object of the exporter's ever passes
 * through the Readable functions the server runs for every request.
 */
class ExportHandler implements Dispatcher.DispatchHandler {
  private abort: ((err?: Error) => void) | null = null;
  private readonly timer: NodeJS.Timeout;
  private status = 0;
  private retryAfter: string | undefined;
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private done = false;

  constructor(private readonly resolve: (r: ExportResponse) => void, timeoutMillis: number) {
    // At the timeout the export is over, whether or not the request has a connection yet (a collector whose
    // address does not answer leaves it waiting for one): aborted if it has, aborted in onConnect if it gets one.
    this.timer = setTimeout(() => {
      this.finish({ status: 'retryable', error: new Error(TIMED_OUT) });
      this.abort?.(new Error(TIMED_OUT));
    }, timeoutMillis);
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
    if (this.done) abort(new Error(TIMED_OUT));
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[]): boolean {
    if (statusCode < 200) return true; // 1xx: the final answer follows
    this.status = statusCode;
    for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
      if (rawHeaders[i]!.length === 11 && rawHeaders[i]!.toString('latin1').toLowerCase() === 'retry-after') this.retryAfter = rawHeaders[i + 1]!.toString('latin1');
    }
    return true;
  }

  onData(chunk: Buffer): boolean {
    this.size += chunk.length;
    if (this.size > MAX_RESPONSE_BYTES) {
      // The collector accepted or refused; either way the answer is not read: the export failed.
      this.finish({ status: 'failure', error: new Error(`the collector's response is larger than ${MAX_RESPONSE_BYTES} bytes`) });
      this.abort?.(new Error('response too large'));
      return false;
    }
    this.chunks.push(chunk);
    return true;
  }

  onComplete(): void {
    const status = this.status;
    const answer = Buffer.concat(this.chunks, Math.min(this.size, MAX_RESPONSE_BYTES));
    if (status >= 200 && status <= 299) return this.finish({ status: 'success', data: answer });
    if (RETRYABLE_STATUS.has(status)) {
      const after = parseRetryAfter(this.retryAfter, Date.now());
      return this.finish(after === null ? { status: 'retryable' } : { status: 'retryable', retryInMillis: after });
    }
    this.finish({ status: 'failure', error: new OTLPExporterError(`the collector answered ${status}`, status, answer.toString('utf8')) });
  }

  onError(error: Error): void {
    // The collector answered 2xx and the body broke off: it accepted the spans.
    if (this.status >= 200 && this.status <= 299) return this.finish({ status: 'success' });
    const code = (error as { code?: unknown }).code;
    this.finish(typeof code === 'string' && RETRYABLE_ERRORS.has(code) ? { status: 'retryable', error } : { status: 'failure', error });
  }

  private finish(result: ExportResponse): void {
    if (this.done) return;
    this.done = true;
    clearTimeout(this.timer);
    this.resolve(result);
  }
}

/** The retry policy of OpenTelemetry's exporters: up to five more attempts, backing off 1 s × 1.5ⁿ (±20 %, at most 5 s) or as Retry-After says, never past the export timeout. */
const RETRY = { attempts: 5, firstBackoffMs: 1_000, maxBackoffMs: 5_000, multiplier: 1.5, jitter: 0.2 } as const;

export class RetryingTransport implements IExporterTransport {
  constructor(private readonly inner: IExporterTransport) {}

  async send(data: Uint8Array, timeoutMillis: number): Promise<ExportResponse> {
    const deadline = Date.now() + timeoutMillis;
    let backoff: number = RETRY.firstBackoffMs;
    let result = await this.inner.send(data, timeoutMillis);
    for (let left = RETRY.attempts; result.status === 'retryable' && left > 0; left -= 1) {
      const jittered = Math.min(backoff * (1 + (Math.random() * 2 - 1) * RETRY.jitter), RETRY.maxBackoffMs);
      backoff *= RETRY.multiplier;
      const wait = result.retryInMillis ?? jittered;
      const remaining = deadline - Date.now();
      if (wait > remaining) return result;
      await new Promise((r) => setTimeout(r, Math.max(0, wait)));
      result = await this.inner.send(data, Math.max(1, deadline - Date.now()));
    }
    return result;
  }

  shutdown(): void {
    this.inner.shutdown();
  }
}
