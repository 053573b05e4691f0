import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash } from 'node:crypto';
import type { Rng } from './rng.js';

// The fuzzer's upstream: a real HTTP server that does what each request's
// `x-fuzz-behaviour` header says, and writes down every execution (every
// request that reached its handler) with what it answered, so the judge can
// check the proxy against the truth: how often each key ran, and what the
// client should have seen.

export const BEHAVIOURS = [
  'ok', 'ok', 'status', 'release', 'big', 'slow', 'slow', 'nocontent', 'hints', 'close', 'trailers', 'early',
  'reset-before', 'reset-mid', 'hang', 'hang-body',
] as const;
export type Behaviour = typeof BEHAVIOURS[number];

/** Behaviours after which the operation's outcome is unknown to the proxy: reset, or past upstream.timeout. */
export const UNKNOWN_OUTCOME: ReadonlySet<Behaviour> = new Set(['reset-before', 'reset-mid', 'hang', 'hang-body']);
/** Behaviours whose client sees a response cut after it began. */
export const CUT_MID_BODY: ReadonlySet<Behaviour> = new Set(['reset-mid', 'hang-body']);

/** The timeout the proxy is configured with; `hang` outlasts it. */
export const UPSTREAM_TIMEOUT_MS = 2000;

export interface Execution {
  readonly id: number;
  readonly behaviour: Behaviour;
  /** The request carried the other payload (a mismatching duplicate ran). */
  readonly other: boolean;
  /** 0 until the handler answers; never set for an unknown outcome. */
  status: number;
  bodyHash: string | null;
}

export const hash = (b: Buffer): string => createHash('sha256').update(b).digest('hex').slice(0, 16);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const BIG = Buffer.alloc(300_000, 'x');

export class ScriptedUpstream {
  /** `tenant|key` → its executions in order. */
  readonly executions = new Map<string, Execution[]>();
  private next = 0;
  private readonly server: http.Server;
  url = '';

  constructor(private readonly rng: Rng) {
    this.server = http.createServer((req, res) => { this.handle(req, res).catch(() => res.destroy()); });
  }

  async start(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }

  of(slot: string): readonly Execution[] {
    return this.executions.get(slot) ?? [];
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const behaviour = req.headers['x-fuzz-behaviour'] as Behaviour;
    // A bare or quoted (Structured Field) key is one key.
    const slot = `${req.headers.authorization}|${String(req.headers['idempotency-key']).replace(/^"|"$/g, '')}`;
    const list = this.executions.get(slot) ?? [];
    this.executions.set(slot, list);
    const e: Execution = { id: ++this.next, behaviour, other: req.headers['x-fuzz-other'] === '1', status: 0, bodyHash: null };
    const n = list.length;
    list.push(e);
    if (behaviour === 'early') {
      // Answers before it reads the (large) request body.
      return this.answer(res, e, 400, Buffer.from(JSON.stringify({ id: e.id, early: true })));
    }
    for await (const _ of req) { /* read the body */ }
    await sleep(behaviour === 'slow' ? 1200 : behaviour === 'hang' ? UPSTREAM_TIMEOUT_MS + 600 : Math.floor(this.rng() * 150));
    if (behaviour === 'reset-before') {
      req.socket.destroy();
      return;
    }
    const status = behaviour === 'release' ? (n === 0 ? 429 : 201)
      : behaviour === 'status' ? Number(req.headers['x-fuzz-status'])
      : behaviour === 'nocontent' ? 204 : 201;
    const body = behaviour === 'nocontent' ? Buffer.alloc(0)
      : behaviour === 'big' ? Buffer.concat([Buffer.from(`{"id":${e.id},"pad":"`), BIG, Buffer.from('"}')])
      : Buffer.from(JSON.stringify({ id: e.id, n }));
    if (behaviour === 'hints') res.writeEarlyHints({ link: '</a.css>; rel=preload' });
    const headers: http.OutgoingHttpHeaders = { 'content-type': 'application/json', 'x-fuzz-execution': String(e.id), 'set-cookie': ['a=1', 'b=2'] };
    if (behaviour === 'close') headers.connection = 'close';
    if (behaviour === 'trailers') headers.trailer = 'x-sum';
    if (!UNKNOWN_OUTCOME.has(behaviour)) {
      e.status = status;
      e.bodyHash = hash(body);
    }
    res.writeHead(status, headers);
    switch (behaviour) {
      case 'reset-mid':
        res.write(body.subarray(0, 10));
        await sleep(20);
        req.socket.destroy();
        return;
      case 'hang-body':
        res.write(body.subarray(0, 5));
        await sleep(UPSTREAM_TIMEOUT_MS + 600);
        res.end(body.subarray(5));
        return;
      case 'big':
        for (let i = 0; i < body.length; i += 65536) {
          res.write(body.subarray(i, i + 65536));
          await sleep(2);
        }
        res.end();
        return;
      case 'trailers':
        res.write(body);
        res.addTrailers({ 'x-sum': 'abc' });
        res.end();
        return;
      default:
        res.end(body);
    }
  }

  private answer(res: http.ServerResponse, e: Execution, status: number, body: Buffer): void {
    e.status = status;
    e.bodyHash = hash(body);
    res.writeHead(status, { 'content-type': 'application/json', 'x-fuzz-execution': String(e.id) });
    res.end(body);
  }
}
