// One autocannon run (programmatic API) with our key plan and our latency
// recorder. autocannon is CommonJS without bundled types; the slice of its
// API we use is typed here.
import { createRequire } from 'node:module';
import type { LatencyRecorder } from './latency.js';

interface CannonRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  setupRequest?: (req: CannonRequest) => CannonRequest;
}

interface CannonRaw {
  readonly duration: number; // seconds
  readonly errors: number;
  readonly timeouts: number;
}

interface CannonInstance {
  on(event: 'response', fn: (client: unknown, statusCode: number, resBytes: number, responseTime: number) => void): void;
  stop(): void;
}

type Autocannon = (opts: Record<string, unknown>, cb: (err: Error | null, result: CannonRaw) => void) => CannonInstance;

export interface CannonRun {
  readonly durationS: number;
  readonly responses: number;
  readonly status: Record<string, number>;
  readonly errors: number;
  readonly timeouts: number;
}

export interface CannonOptions {
  readonly origin: string;
  readonly path: string;
  readonly connections: number;
  readonly durationS: number;
  readonly body: string;
  readonly nextKey: () => string;
  readonly latency: LatencyRecorder | null;
}

export function runCannon(opts: CannonOptions): Promise<CannonRun> {
  const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;
  const status: Record<string, number> = {};
  let responses = 0;
  const { nextKey, latency } = opts;
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: opts.origin,
        connections: opts.connections,
        duration: opts.durationS,
        pipelining: 1,
        timeout: 10,
        requests: [
          {
            method: 'POST',
            path: opts.path,
            headers: { 'content-type': 'application/json' },
            body: opts.body,
            setupRequest: (req: CannonRequest): CannonRequest => {
              req.headers['idempotency-key'] = nextKey();
              return req;
            },
          },
        ],
      },
      (err, raw) => {
        if (err) {
          reject(err);
          return;
        }
        resolve({ durationS: raw.duration, responses, status, errors: raw.errors, timeouts: raw.timeouts });
      },
    );
    instance.on('response', (_client, statusCode, _bytes, responseTime) => {
      responses += 1;
      status[statusCode] = (status[statusCode] ?? 0) + 1;
      if (latency !== null) latency.record(responseTime);
    });
  });
}
