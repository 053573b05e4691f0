import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { sleep } from '../helpers/wait.js';
import { uniqueKey } from './support.js';

// upstream.keepAliveTimeout: how long the proxy keeps an idle upstream
// connection for reuse. An upstream that closes idle connections first (and
// without a Keep-Alive hint, like gunicorn after 2 s) races the proxy's next
// request on that connection: a request written as the upstream's FIN is on
// its way fails, and on a keyed route that is an outcome the proxy cannot
// know (502, stored). Set below the upstream's own timeout, the proxy always
// closes first. Set, it also caps what an upstream's Keep-Alive hint asks for.

/** The upstream closes a connection idle for this long (its keep-alive timeout). */
const UPSTREAM_IDLE_MS = 1000;
const PROXY_IDLE_MS = 400;
/** Longer than both idle timeouts, far shorter than the proxy's default of 4 s without a hint. */
const WATCH_MS = 1600;

interface Conn {
  requests: number;
  /** Who ended the connection first: the proxy (its FIN reached the upstream), the upstream (its idle timer), or nobody yet. */
  closedBy: 'proxy' | 'upstream' | null;
}

interface RawUpstream {
  readonly url: string;
  readonly conns: Conn[];
  close(): Promise<void>;
}

/**
 * An HTTP/1.1 upstream on a raw socket, so that what it says about keep-alive is exactly what the test gives:
 * `hint` adds `Keep-Alive: timeout=<s>` to each answer. It ends a connection idle for `idleMs` itself.
 */
async function rawUpstream(idleMs: number, hint: string | null): Promise<RawUpstream> {
  const conns: Conn[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    const conn: Conn = { requests: 0, closedBy: null };
    conns.push(conn);
    let buffered = Buffer.alloc(0);
    let idle: NodeJS.Timeout | null = null;
    const arm = (): void => {
      idle = setTimeout(() => {
        if (conn.closedBy === null) conn.closedBy = 'upstream';
        socket.end();
      }, idleMs);
    };
    socket.on('data', (chunk: Buffer) => {
      if (idle !== null) clearTimeout(idle);
      idle = null;
      buffered = Buffer.concat([buffered, chunk]);
      for (;;) {
        const end = buffered.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buffered.subarray(0, end).toString('latin1');
        const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
        if (buffered.length < end + 4 + length) return;
        buffered = buffered.subarray(end + 4 + length);
        conn.requests++;
        const body = JSON.stringify({ connection: conns.indexOf(conn), request: conn.requests });
        socket.write(
          `HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
            `${hint === null ? '' : `keep-alive: ${hint}\r\n`}\r\n${body}`,
        );
        arm();
      }
    });
    socket.on('end', () => {
      if (conn.closedBy === null) conn.closedBy = 'proxy';
      if (idle !== null) clearTimeout(idle);
      socket.end();
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      sockets.delete(socket);
      if (idle !== null) clearTimeout(idle);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    conns,
    close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    }),
  };
}

describe('upstream.keepAliveTimeout: idle upstream connections', () => {
  let db: TestDatabase;
  const upstreams: RawUpstream[] = [];
  const proxies: RunningProxy[] = [];

  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => {
    await Promise.all(proxies.map((p) => p.close()));
    await Promise.all(upstreams.map((u) => u.close()));
    await db.drop();
  });

  /** A keyed POST through a new proxy in front of a new upstream; then the connection it used, after WATCH_MS idle. */
  async function idleAfterOne(keepAliveTimeout: string | null, hint: string | null): Promise<{ upstream: RawUpstream; proxy: RunningProxy; conn: Conn }> {
    const upstream = await rawUpstream(hint === null ? UPSTREAM_IDLE_MS : 60_000, hint);
    upstreams.push(upstream);
    const yaml = keepAliveTimeout === null ? '' : `upstream: { keepAliveTimeout: ${keepAliveTimeout} }\n`;
    const proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml });
    proxies.push(proxy);
    const r = await send(`${proxy.url}/orders`, { headers: { 'idempotency-key': uniqueKey('ka'), 'content-type': 'application/json' }, body: '{}' });
    assert.equal(r.status, 201);
    assert.equal(upstream.conns.length, 1);
    await sleep(WATCH_MS);
    return { upstream, proxy, conn: upstream.conns[0]! };
  }

  test('set below an upstream that closes idle connections without a hint, the proxy closes them first; the next request gets a new connection', async () => {
    const { upstream, proxy, conn } = await idleAfterOne(`${PROXY_IDLE_MS}ms`, null);
    assert.equal(conn.closedBy, 'proxy', `the proxy closes its idle connection after ${PROXY_IDLE_MS} ms, before the upstream's ${UPSTREAM_IDLE_MS} ms`);
    const again = await send(`${proxy.url}/orders`, { headers: { 'idempotency-key': uniqueKey('ka'), 'content-type': 'application/json' }, body: '{}' });
    assert.equal(again.status, 201);
    assert.deepEqual(again.json(), { connection: 1, request: 1 }, 'a new connection');
    assert.equal(upstream.conns.length, 2);
  });

  test('unset, the proxy keeps a connection without a hint for 4 s: such an upstream closes it first (the race the setting avoids)', async () => {
    const { conn } = await idleAfterOne(null, null);
    assert.equal(conn.closedBy, 'upstream');
  });

  test("set, it caps an upstream's Keep-Alive hint; unset, the hint is followed", async () => {
    const capped = await idleAfterOne(`${PROXY_IDLE_MS}ms`, 'timeout=60');
    assert.equal(capped.conn.closedBy, 'proxy', 'the hint asks for 60 s; the setting closes it after 400 ms');
    const hinted = await idleAfterOne(null, 'timeout=60');
    assert.equal(hinted.conn.closedBy, null, 'kept open, as the hint asks');
    const reused = await send(`${hinted.proxy.url}/orders`, { headers: { 'idempotency-key': uniqueKey('ka'), 'content-type': 'application/json' }, body: '{}' });
    assert.deepEqual(reused.json(), { connection: 0, request: 2 }, 'the same connection, reused');
  });
});
