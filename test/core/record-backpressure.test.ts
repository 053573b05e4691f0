import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startTestProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { header, repeatedSha256, uniqueKey } from './support.js';
import { readRawResponse } from '../helpers/raw-http.js';
import { sleep, waitFor } from '../helpers/wait.js';

// The recorded exchange (src/proxy/relay.ts, record mode) under a client that
// reads slowly or not at all: the upstream is held back rather than buffered
// in the proxy, every byte still arrives, and a client that leaves while the
// upstream is held back does not leave the exchange stuck: it runs to its end
// and the record is committed, so the retry is a replay.

const yaml = `
routes:
  - name: exports
    match: { path: "/exports/**" }
    maxStoredResponseBytes: 64KiB
`;

const BIG = 48 * 1024 * 1024;
const CHUNK = Buffer.alloc(64 * 1024, 5);

interface Sent {
  written: number;
  blocked: boolean;
  done: boolean;
}

describe('a recorded exchange under a slow client', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  const sent = new Map<string, Sent>();
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(async (req, _n, res) => {
      const s: Sent = { written: 0, blocked: false, done: false };
      sent.set(req.headers['idempotency-key'] as string, s);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(BIG) });
      while (s.written < BIG) {
        s.written += CHUNK.length;
        if (!res.write(CHUNK)) {
          s.blocked = true;
          await new Promise((r) => res.once('drain', r));
        }
      }
      res.end(() => (s.done = true));
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml });
  });
  after(async () => {
    await proxy.close();
    await upstream.close();
    await db.drop();
  });

  /** Opens a connection that reads nothing yet and sends a keyed POST on it. */
  const pausedRequest = async (key: string): Promise<net.Socket> => {
    const u = new URL(proxy.url);
    const socket = net.connect(Number(u.port), u.hostname);
    socket.on('error', () => {});
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.pause();
    socket.write(`POST /exports/all HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ${key}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
    await waitFor('the upstream to start sending', () => ((sent.get(key)?.written ?? 0) > 0 ? true : undefined));
    return socket;
  };

  const executionsOf = (key: string): number => upstream.received.filter((r) => r.headers['idempotency-key'] === key).length;

  test('the upstream is held back while the client reads nothing; every byte arrives; the retry replays', async () => {
    const key = uniqueKey('slow');
    const socket = await pausedRequest(key);
    await sleep(1000);
    const s = sent.get(key)!;
    assert.ok(s.blocked, 'the upstream had to wait for the proxy to drain');
    assert.ok(s.written < BIG / 2, `the upstream wrote ${s.written} bytes while the client read nothing`);
    const { head, bytes, sha256 } = await readRawResponse(socket);
    assert.match(head, /^HTTP\/1\.1 200 /);
    assert.equal(bytes, BIG);
    assert.equal(sha256, repeatedSha256(CHUNK, BIG / CHUNK.length));
    const retry = await send(`${proxy.url}/exports/all`, { headers: { 'idempotency-key': key }, body: '{}' });
    assert.equal(retry.status, 200);
    assert.equal(header(retry, 'idempotent-replayed'), 'true');
    assert.ok(retry.body.length < 1024, 'over maxStoredResponseBytes: replayed without the body');
    assert.equal(executionsOf(key), 1);
  });

  test('a client that leaves while the upstream is held back: the exchange runs to its end, the record is committed, the retry replays', async () => {
    const key = uniqueKey('gone');
    const socket = await pausedRequest(key);
    await waitFor('the upstream to be held back', () => (sent.get(key)!.blocked ? true : undefined));
    const heldAt = sent.get(key)!.written;
    socket.destroy();
    // With nobody to drain to, the proxy reads the rest from the upstream (recording only).
    await waitFor('the upstream to send everything', () => (sent.get(key)!.done ? true : undefined), 15_000);
    assert.ok(heldAt < BIG, 'the client left before the body was complete');
    const retry = await waitFor(
      'the record to be committed',
      async () => {
        const r = await send(`${proxy.url}/exports/all`, { headers: { 'idempotency-key': key }, body: '{}' });
        return r.status === 409 ? undefined : r;
      },
      5000,
    );
    assert.equal(retry.status, 200);
    assert.equal(header(retry, 'idempotent-replayed'), 'true');
    assert.equal(executionsOf(key), 1);
  });
});
