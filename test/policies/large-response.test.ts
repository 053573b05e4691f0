// Responses over maxStoredResponseBytes: streamed whole to the first client
// (never buffered whole in the proxy), recorded without their body; the retry
// is a replay — original status and stored headers, a small problem body
// saying the body was not retained — and never runs the operation again.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import type http from 'node:http';
import { request } from 'undici';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { spawnProxy, startTestProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { peakRss, problemType, sha256 } from './support.js';
import { tempDir, type TempDir } from '../helpers/tmp.js';
import { NODE_FLAGS } from '../../src/node-flags.js';

const MiB = 1024 * 1024;
const FIVE_MB = randomBytes(5 * MiB);

const YAML = `
routes:
  - name: exports
    match: { path: /exports/** }
    tenant: { constant: t }
    maxStoredResponseBytes: 64KiB
`;

/** Writes `total` bytes of a repeating pattern in 64 KiB chunks, honouring backpressure. */
async function stream(res: http.ServerResponse, total: number): Promise<void> {
  const chunk = Buffer.alloc(64 * 1024, 'idempotency-proxy ');
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'x-export-id': 'exp_42' });
  for (let sent = 0; sent < total; sent += chunk.length) {
    if (!res.write(chunk.subarray(0, Math.min(chunk.length, total - sent)))) {
      await new Promise<void>((r) => res.once('drain', r));
    }
  }
  res.end();
}

const patternHash = (total: number): string => {
  const h = createHash('sha256');
  const chunk = Buffer.alloc(64 * 1024, 'idempotency-proxy ');
  for (let sent = 0; sent < total; sent += chunk.length) h.update(chunk.subarray(0, Math.min(chunk.length, total - sent)));
  return h.digest('hex');
};

describe('large responses (maxStoredResponseBytes: 64KiB)', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: RunningProxy;
  let spawned: SpawnedProxy | null = null;
  let dir: TempDir;
  const hits = (path: string): number => upstream.received.filter((r) => r.url === path).length;

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(async (req, _n, res) => {
      if (req.url === '/exports/big') {
        res.writeHead(201, {
          'content-type': 'application/octet-stream', 'x-export-id': 'exp_1', etag: '"abc"', 'content-length': FIVE_MB.length,
          'content-disposition': 'attachment; filename="export.bin"', 'content-digest': `sha-256=:${createHash('sha256').update(FIVE_MB).digest('base64')}:`,
          'cache-control': 'private, max-age=60',
        });
        res.end(FIVE_MB);
      } else if (req.url === '/exports/edge') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end(Buffer.alloc(64 * 1024, 'x')); // exactly the limit: retained
      } else {
        await stream(res, Number(new URL(req.url, 'http://x').searchParams.get('bytes')));
      }
    });
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML });
    dir = tempDir();
  });
  after(async () => {
    await spawned?.stop();
    await proxy?.close();
    await upstream?.close();
    await db?.drop();
    dir?.remove();
  });

  test('5 MB streams whole to the first client; the retry is a body-not-retained replay without re-execution', async () => {
    const headers = { 'idempotency-key': 'exp-1', 'content-type': 'application/json' };
    const first = await send(`${proxy.url}/exports/big`, { headers, body: '{}' });
    assert.equal(first.status, 201);
    assert.equal(first.body.length, FIVE_MB.length);
    assert.equal(sha256(first.body), sha256(FIVE_MB));
    assert.equal(first.headers['content-type'], 'application/octet-stream');

    const rows = await sql<{ state: string; status_code: number; body_retained: boolean; body_size: string; stored: number }>(db.url,
      "SELECT state, status_code, body_retained, body_size, octet_length(response_body) AS stored FROM idempotency_keys WHERE idem_key = 'exp-1'");
    assert.deepEqual(rows, [{ state: 'complete', status_code: 201, body_retained: false, body_size: String(FIVE_MB.length), stored: 0 }]);

    const retry = await send(`${proxy.url}/exports/big`, { headers, body: '{}' });
    assert.equal(hits('/exports/big'), 1, 'the retry did not run the operation again');
    assert.equal(retry.status, 201, 'the original status');
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.equal(retry.headers['x-export-id'], 'exp_1', 'stored headers are replayed');
    assert.equal(retry.headers['content-type'], 'application/problem+json');
    assert.equal(retry.headers['cache-control'], 'private, max-age=60');
    // Headers that describe the original body would lie about the problem body.
    for (const h of ['etag', 'content-disposition', 'content-digest']) assert.equal(retry.headers[h], undefined, h);
    assert.equal(Number(retry.headers['content-length']), retry.body.length);
    assert.ok(retry.body.length < 1024);
    assert.equal(problemType(retry), 'body-not-retained');
    const p = retry.json();
    assert.equal(p.status, 201);
    assert.equal(p.originalBodyBytes, FIVE_MB.length);
  });

  test('a body of exactly the limit is retained and replayed byte for byte', async () => {
    const headers = { 'idempotency-key': 'edge-1' };
    const first = await send(`${proxy.url}/exports/edge`, { headers, body: 'x' });
    const retry = await send(`${proxy.url}/exports/edge`, { headers, body: 'x' });
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.equal(retry.headers['content-type'], 'text/plain');
    assert.deepEqual(retry.body, first.body);
    assert.equal(first.body.length, 64 * 1024);
  });

  test('100 MiB through a spawned proxy: peak RSS grows by far less than the body', async () => {
    const file = dir.write('exports.yaml', `listen: 127.0.0.1:0
admin: off
upstream: { url: "${upstream.url}" }
store: { postgres: "${db.url}" }
${YAML}`);
    // Started the way the image, `npm start` and docs/operations.md run it.
    // The node option matters on Node 24: its V8 frees dead stream buffers
    // with a young-generation collection only once young buffers reach 2 x
    // the maximum semi-space, a default it raised fourfold (32 -> 128 MB, past
    // the 64 MB at which a full collection starts instead). Same machine:
    // growth 2-44 MiB on Node 24 with V8's defaults, 4-13 with this option,
    // 0-4 on Node 20 and 22 (docs/operations.md, Sizing).
    spawned = await spawnProxy(['serve', '--config', file], {}, { nodeArgs: NODE_FLAGS });
    const pid = spawned.proc.pid!;
    const fetchHash = async (key: string, bytes: number): Promise<{ status: number; size: number; hash: string; replayed: unknown }> => {
      const r = await request(`${spawned!.url}/exports/stream?bytes=${bytes}`, { method: 'POST', headers: { 'idempotency-key': key }, body: '{}' });
      const h = createHash('sha256');
      let size = 0;
      for await (const chunk of r.body) {
        h.update(chunk as Buffer);
        size += (chunk as Buffer).length;
      }
      return { status: r.statusCode, size, hash: h.digest('hex'), replayed: r.headers['idempotent-replayed'] };
    };
    // Warm up first. Streaming leaves up to ~64 MiB of garbage buffers that V8
    // collects only past its external-memory threshold, whatever the body size;
    // after a first large stream that ceiling is reached, so a later, larger
    // stream shows what the proxy itself holds on to.
    await fetchHash('warm-1', 40 * MiB);
    const base = peakRss(pid);
    const total = 100 * MiB;
    const big = await fetchHash('stream-100', total);
    const grown = peakRss(pid) - base;
    assert.equal(big.status, 200);
    assert.equal(big.size, total);
    assert.equal(big.hash, patternHash(total));
    assert.ok(grown < 30 * MiB, `peak RSS grew by ${(grown / MiB).toFixed(1)} MiB streaming ${total / MiB} MiB`);

    const replay = await fetchHash('stream-100', total);
    assert.equal(replay.replayed, 'true');
    assert.ok(replay.size < 1024);
    assert.equal(upstream.received.filter((r) => r.url.startsWith('/exports/stream') && r.headers['idempotency-key'] === 'stream-100').length, 1);
  });
});
