// Shapes shared by the orchestrator (run.ts) and the load generator (load.ts).
// The orchestrator passes a spec as one JSON argument; the load generator
// answers with one JSON line on stdout.

/** How the load generator picks the Idempotency-Key of each request. */
export type KeyPlan =
  | { readonly kind: 'unique' } // a fresh key per request
  | { readonly kind: 'fixed'; readonly count: number; readonly warmPasses: number } // replays of warmed keys
  | { readonly kind: 'storm'; readonly dupes: number }; // `dupes` consecutive requests share a key

/**
 * How the load reaches the server: HTTP/1.1 in clear text or over TLS (wrk),
 * or HTTP/2 over TLS (h2load, lib/h2load.ts). h2load sends one fixed header
 * set, so an h2 scenario carries its key in the path (`<path>/<key>`, on a
 * route with keyScope: tenantAndPath, bench/proxy.yaml) under a constant
 * Idempotency-Key.
 */
export type Protocol = 'http' | 'https' | 'h2';

/** The program that generates the load (BENCH_LOAD; see lib/wrk.ts). */
export type LoadGenerator = 'wrk' | 'autocannon' | 'h2load'; // h2load: HTTP/2 only, whatever BENCH_LOAD says

export interface CannonSpec {
  readonly mode: 'cannon';
  readonly generator?: LoadGenerator; // absent: load.ts chooses from BENCH_LOAD / PATH
  readonly origin: string; // http://127.0.0.1:NNNN, https:// for 'https' and 'h2'
  readonly path: string;
  readonly protocol?: Protocol; // absent: 'http'; 'h2' always runs h2load, whatever `generator` says
  /** 'h2': connections × streams in flight (h2load -c1 -m<streams> per connection); `connections` is their product. */
  readonly h2?: { readonly connections: number; readonly streams: number };
  readonly connections: number;
  readonly durationS: number;
  readonly warmupS: number;
  readonly keys: KeyPlan;
  readonly keyPrefix: string;
  readonly body: string;
  readonly statsUrl: string | null; // the upstream's counter, read before and after
}

export interface RssSpec {
  readonly mode: 'rss';
  readonly origin: string;
  readonly path: string;
  readonly sockets: number;
  readonly keyPrefix: string;
  readonly body: string;
}

export type LoadSpec = CannonSpec | RssSpec;

export interface LatencySummary {
  readonly p50: number; // milliseconds, microsecond resolution
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
  readonly mean: number;
}

export interface CannonResult {
  readonly generator: LoadGenerator;
  readonly rps: number; // every response counted, whatever its status
  readonly responses: number;
  readonly durationS: number;
  readonly latencyMs: LatencySummary; // every response, whatever its status
  // wrk outside the storm plan knows only "> 399 or not": keys '2xx/3xx' and '4xx/5xx' (lib/wrk.ts)
  readonly status: Readonly<Record<string, number>>;
  readonly non2xx: number;
  readonly errors: number; // failed requests (connect/read/write errors, timeouts), not statuses
  readonly timeouts: number;
  readonly upstreamCalls: number | null; // upstream requests during the measured window
  readonly warm: { readonly status: Readonly<Record<string, number>>; readonly errors: number } | null;
}

export interface RssOpenReport {
  readonly phase: 'open';
  readonly socketsOpened: number;
  readonly socketsIdleNow: number;
  readonly rounds: readonly { readonly status: Readonly<Record<string, number>>; readonly errors: number; readonly ms: number }[];
}
