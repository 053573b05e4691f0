import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

// An upstream the test steers request by request: every arrival is an
// Exchange the test answers (or holds, or breaks) when it chooses. Counts
// executions per idempotency key, which is what "executed at most once" is
// checked against.

export interface Exchange {
  readonly n: number;
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Buffer;
  /** The Idempotency-Key header as the upstream received it. */
  readonly key: string | undefined;
  readonly res: http.ServerResponse;
  /** Resolves when the proxy's connection to us closed (e.g. the proxy was killed). */
  readonly closed: Promise<void>;
  respond(status?: number, body?: string | Buffer, headers?: Record<string, string>): void;
}

/** What to do with an arrival; the default holds it until the test acts. */
export type Behaviour = (ex: Exchange) => void;

export interface ControlledUpstream {
  readonly url: string;
  readonly port: number;
  readonly exchanges: Exchange[];
  /** Resolves with the first exchange (past or future) that matches. */
  arrival(match?: (ex: Exchange) => boolean, timeoutMs?: number): Promise<Exchange>;
  /** Upstream executions (handler ran: body fully read) for one key. */
  executions(key: string): number;
  behave(b: Behaviour): void;
  close(): Promise<void>;
}

export const hold: Behaviour = () => {};
export const answer = (status = 201, delayMs = 0): Behaviour => (ex) => {
  const go = (): void => ex.respond(status, JSON.stringify({ execution: ex.n, key: ex.key ?? null, body: ex.body.toString() }));
  if (delayMs > 0) setTimeout(go, delayMs);
  else go();
};

export async function startControlledUpstream(initial: Behaviour = answer(), port = 0): Promise<ControlledUpstream> {
  let behaviour = initial;
  const exchanges: Exchange[] = [];
  const perKey = new Map<string, number>();
  const waiting: Array<{ match: (ex: Exchange) => boolean; resolve: (ex: Exchange) => void }> = [];
  const sockets = new Set<Socket>();
  let n = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    const closed = new Promise<void>((resolve) => res.on('close', () => resolve()));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const key = req.headers['idempotency-key'] as string | undefined;
      const ex: Exchange = {
        n: ++n,
        method: req.method!,
        url: req.url!,
        headers: req.headers,
        body: Buffer.concat(chunks),
        key,
        res,
        closed,
        respond(status = 201, body = '', headers = {}) {
          if (res.destroyed || res.headersSent) return;
          const b = Buffer.isBuffer(body) ? body : Buffer.from(body);
          res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(b.length), ...headers });
          res.end(b);
        },
      };
      if (key !== undefined) perKey.set(key, (perKey.get(key) ?? 0) + 1);
      exchanges.push(ex);
      for (let i = waiting.length - 1; i >= 0; i--) {
        if (waiting[i]!.match(ex)) waiting.splice(i, 1)[0]!.resolve(ex);
      }
      behaviour(ex);
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  const bound = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${bound}`,
    port: bound,
    exchanges,
    arrival(match = () => true, timeoutMs = 10_000) {
      const found = exchanges.find(match);
      if (found !== undefined) return Promise.resolve(found);
      return new Promise((resolve, reject) => {
        const entry = { match, resolve: (ex: Exchange) => { clearTimeout(t); resolve(ex); } };
        const t = setTimeout(() => {
          waiting.splice(waiting.indexOf(entry), 1);
          reject(new Error(`no matching upstream arrival within ${timeoutMs} ms`));
        }, timeoutMs);
        waiting.push(entry);
      });
    },
    executions: (key) => perKey.get(key) ?? 0,
    behave(b) {
      behaviour = b;
    },
    close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    }),
  };
}
