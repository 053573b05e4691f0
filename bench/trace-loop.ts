// Tracing's own work for one request, in a loop: what a traced replay (or new
// key) asks of src/tracing/ — the server span's start, its store spans, the
// link, the end, encoded into export batches sent to a no-op — with nothing
// else of the proxy around it. For comparing builds of tracing's code below
// the pairs' noise (bench/README.md, Method: counting instructions), not a
// row of the benchmark and no target of its own.
//
//   node dist/bench/trace-loop.js [--shape replay|newkey] [--ratio 1] [--n 100000] [--rounds 6]
//     → nanoseconds a request per round (wall clock, noisy)
//   valgrind --tool=callgrind --instr-atstart=no --smc-check=all-non-file \
//     node --perf-basic-prof dist/bench/trace-loop.js --callgrind
//     → instruments the last two rounds only (callgrind_control -i on/off from
//       inside), so the total callgrind prints, divided by 2 × n, is the
//       instructions a request once the JIT has settled.
//
// The request is a stand-in with the fields tracing reads (RequestContext's
// names); the clock readings the proxy's phases take anyway (the claim's, the
// commit's, the log line's duration) are taken here too and passed in.
import { execFile } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import type { RequestContext } from '../src/lifecycle/context.js';
import type { StoredResponse } from '../src/store/records.js';
import { IdPool } from '../src/tracing/ids.js';
import { ProtobufSpans } from '../src/tracing/otlp-protobuf.js';
import { Recorder } from '../src/tracing/recorder.js';
import { samplerFrom } from '../src/tracing/sampler.js';
import { hex } from '../src/tracing/span.js';
import { RequestTracing } from '../src/tracing/spans.js';

const { values: args } = parseArgs({
  options: {
    shape: { type: 'string', default: 'replay' },
    // The sampler's ratio (tracing.sampleRatio): 0 counts what an unsampled request costs tracing.
    ratio: { type: 'string', default: '1' },
    n: { type: 'string', default: '100000' },
    rounds: { type: 'string', default: '6' },
    callgrind: { type: 'boolean', default: false },
  },
});
const shape = args.shape;
if (shape !== 'replay' && shape !== 'newkey') throw new Error(`--shape ${shape}: replay or newkey`);
const N = Number(args.n);
const ROUNDS = Number(args.rounds);
const RATIO = Number(args.ratio);
if (!(RATIO >= 0 && RATIO <= 1)) throw new Error(`--ratio ${args.ratio}: a number from 0 to 1`);
if (!Number.isInteger(N) || N < 1000 || N % 1000 !== 0) throw new Error(`--n ${args.n}: a multiple of 1000`);
if (!Number.isInteger(ROUNDS) || ROUNDS < 3) throw new Error(`--rounds ${args.rounds}: 3 or more`);

let bytes = 0;
let lost = 0;
const encoder = new ProtobufSpans({ resource: { 'service.name': 'trace-loop' }, scopeName: 'idempotency-proxy', scopeVersion: '0.0.0' });
const recorder = new Recorder(encoder, {
  send: (body) => {
    bytes += body.length;
    return Promise.resolve();
  },
  shutdown: () => Promise.resolve(),
}, { maxQueue: 16_384, maxBatch: 4_096, delayMs: 5_000, concurrency: 4, onLoss: (spans) => void (lost += spans) });
const tracing = new RequestTracing(recorder, samplerFrom(RATIO, {}), new IdPool(), () => null);

// A thousand records, each with the trace context a traced execution stores, as flat strings (as node-postgres
// reads them), and a thousand key hashes.
const ids = new IdPool();
const flat = (s: string): string => Buffer.from(s, 'latin1').toString('latin1');
const traceparent = (): string => flat(`00-${hex(ids.word())}${hex(ids.word())}${hex(ids.word())}${hex(ids.word() | 1)}-${hex(ids.word())}${hex(ids.word() | 1)}-01`);
const records: StoredResponse[] = Array.from({ length: 1000 }, () => ({
  status: 201, headers: [['content-type', 'application/json']], body: Buffer.from('{"ok":true}'), bodyRetained: true, bodySize: 11, trace: traceparent(),
}));
const hashes = Array.from({ length: 1000 }, (_, i) => flat((0x100000000000 + i * 7919).toString(16).slice(0, 12)));

/** The fields of RequestContext that tracing reads and writes. */
class Request {
  readonly req = { headers: {} as Record<string, string> };
  readonly method = 'POST';
  readonly start = performance.now();
  readonly path = shape === 'replay' ? '/bench/replay' : '/bench/newkey';
  readonly route = { name: 'newkey' };
  outcome = 'passthrough';
  phase = 'framing';
  status = 0;
  source: string | null = null;
  detail: string | null = null;
  span = null;
  durationMs = -1;
  constructor(readonly key: string, private readonly hash: string) {}
  hashedKey(): string {
    return this.hash;
  }
}

/** A request's server span started and its claim span recorded, as the claim phase does. */
function claimed(i: number, claim: string): RequestContext {
  const ctx = new Request('k', hashes[i % 1000]!) as unknown as RequestContext;
  tracing.start(ctx);
  tracing.storeSpan(ctx, 'claim', performance.now(), performance.now(), claim);
  return ctx;
}

function replay(i: number): void {
  const ctx = claimed(i, 'complete');
  ctx.outcome = 'replayed';
  ctx.phase = 'claim';
  ctx.status = 201;
  tracing.linkReplay(ctx, records[i % 1000]!);
  ctx.durationMs = performance.now() - ctx.start;
  tracing.end(ctx);
}

const headers: string[] = [];
function newKey(i: number): void {
  const ctx = claimed(i, 'claimed');
  const t0 = performance.now();
  headers.length = 0;
  tracing.upstreamStart(ctx, headers);
  const t1 = performance.now();
  tracing.upstreamEnd(ctx, t0, t1, 201);
  tracing.withTrace(ctx, records[i % 1000]!);
  tracing.storeSpan(ctx, 'commit', t1, performance.now(), null);
  ctx.outcome = 'executed';
  ctx.phase = 'commit';
  ctx.status = 201;
  ctx.durationMs = performance.now() - ctx.start;
  tracing.end(ctx);
}

const control = (on: boolean): Promise<void> => new Promise((resolve, reject) => {
  execFile('callgrind_control', ['-i', on ? 'on' : 'off', String(process.pid)], (err) => (err ? reject(err) : resolve()));
});

const one = shape === 'replay' ? replay : newKey;
for (let r = 0; r < ROUNDS; r++) {
  if (args.callgrind && r === ROUNDS - 2) await control(true);
  const t = process.hrtime.bigint();
  for (let i = 0; i < N; i += 1000) {
    for (let j = i; j < i + 1000; j++) one(j);
    // Lets the sends of sealed batches settle, as the proxy's event loop would.
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  console.log(`round ${r + 1}: ${(Number(process.hrtime.bigint() - t) / N).toFixed(0)} ns a request`);
}
if (args.callgrind) await control(false);
await recorder.shutdown();
console.log(`${shape}: ${(bytes / (ROUNDS * N)).toFixed(0)} bytes exported a request, ${lost} spans lost${args.callgrind ? `; instructions a request: callgrind's total ÷ ${2 * N}` : ''}`);
