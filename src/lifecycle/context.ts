import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TraceSpan } from '../tracing/span.js';
import type { ErrorSource, UpstreamError } from '../errors.js';
import { keyHash } from '../log/logger.js';
import type { Outcome } from '../metrics/metrics.js';
import type { CompiledRoute } from '../policy/router.js';
import type { Recording } from '../proxy/record-handler.js';
import type { ClaimRequest } from '../store/records.js';
import type { KeyHold } from './hold.js';
import type { RoutePlan } from './plan.js';
import type { PhaseName } from './verdict.js';

// One per request: what every phase reads and writes. Fields are declared up
// front so every context has the same shape.

const REQUEST_ID_RE = /^[\x21-\x7e]{1,128}$/;
const EMPTY = Buffer.alloc(0);

export class RequestContext {
  readonly requestId: string;
  readonly start = performance.now();
  readonly method: string;
  readonly path: string;
  readonly query: string;
  /** The phase running now; once answered, the phase whose verdict answered the request. */
  phase: PhaseName = 'framing';
  route: CompiledRoute | null = null;
  plan: RoutePlan | null = null;
  outcome: Outcome = 'passthrough';
  /** Who failed, when the outcome does not say it (a fault: its own source); otherwise derived from the outcome at the end. */
  source: ErrorSource | null = null;
  status = 0;
  // identify
  body: Buffer = EMPTY;
  /** Bytes this request holds in the memory budget (its body, and a found outcome probe's answer). */
  buffered = 0;
  tenantId = '';
  key: string | null = null;
  fingerprint: Buffer = EMPTY;
  // claim
  claim: ClaimRequest | null = null;
  ownerToken: string | null = null;
  attempt = 0;
  hold: KeyHold | null = null;
  // probe (onExpiredLease: probe): what the outcome probe said, null when none was sent
  probe: 'found' | 'absent' | 'failed' | null = null;
  // forward
  exchange: Recording | null = null;
  upstreamError: UpstreamError | null = null;
  released = false;
  upstreamMs = -1;
  upstreamStart = 0; // performance.now() when the request went upstream
  storeMs = 0;
  detail: string | null = null;
  shadow: string | null = null;
  cache: 'hit' | 'miss' | null = null;
  // tracing (src/tracing/spans.ts): null when tracing is off
  span: TraceSpan | null = null;
  /** The request's duration as its metrics and log line record it (src/lifecycle/finish.ts); -1 until then. */
  durationMs = -1;
  private keyHashed: string | undefined = undefined;

  constructor(readonly req: IncomingMessage, readonly res: ServerResponse) {
    const incoming = req.headers['x-request-id'];
    this.requestId = typeof incoming === 'string' && REQUEST_ID_RE.test(incoming) ? incoming : randomUUID();
    this.method = req.method ?? 'GET';
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    this.path = q === -1 ? url : url.slice(0, q);
    this.query = q === -1 ? '' : url.slice(q + 1);
  }

  /** keyHash(tenantId, key), computed once: the log line and the server span both carry it. Only with a key. */
  hashedKey(): string {
    return (this.keyHashed ??= keyHash(this.tenantId, this.key!));
  }

  elapsedMs(): number {
    return performance.now() - this.start;
  }
}
