import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import pg from 'pg';
import type { RunningProxy } from '../../src/app.js';
import { cacheKey } from '../../src/store/cache-codec.js';
import { settle } from '../../src/upstream/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { LOADED_MACHINE_TIMEOUT_MS } from './helpers/proxy.js';
import { startTestProxy } from '../helpers/proxy.js';
import { deletePrefix, sharedRedis, uniquePrefix } from '../helpers/redis.js';

// A row the upstream settled (docs/co-commit.md) keeps the settled record
// when the proxy commits it — in PostgreSQL and in Redis. The upstream here
// answers the live client with another body than the one it settled: the
// live client gets the live answer, every duplicate the settled one, with
// Redis and without.

const YAML = `
routes:
  - name: orders
    match: { path: "/orders" }
    tenant: { constant: t }
`;

describe('co-commit with the Redis cache: the settled record is the one replayed', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let upstream: TestUpstream;
  let cached: RunningProxy;
  let plain: RunningProxy;
  let redis: Redis;
  const prefix = uniquePrefix();

  before(async () => {
    redis = await sharedRedis();
    db = await createTestDatabase();
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    upstream = await startUpstream(async (req, n, res) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const settled = await settle(client, req, { status: 201, headers: { 'content-type': 'text/plain' }, body: `settled-${n}` });
        await client.query('COMMIT');
        res.writeHead(201, { 'content-type': 'text/plain', 'x-settled': String(settled) });
        res.end(`live-${n}`);
      } finally {
        client.release();
      }
    });
    cached = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, redisUrl: 'redis://127.0.0.1:6379', yaml: YAML, start: { redisCache: { prefix, commandTimeoutMs: LOADED_MACHINE_TIMEOUT_MS } } });
    plain = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: YAML });
  });

  after(async () => {
    await cached?.close();
    await plain?.close();
    await upstream?.close();
    await pool?.end();
    if (redis !== undefined) {
      await deletePrefix(redis, prefix);
      redis.disconnect();
    }
    await db?.drop();
  });

  for (const which of ['cached', 'plain'] as const) {
    test(`${which}: the live client gets the upstream's answer; every duplicate the settled record`, async () => {
      const proxy = which === 'cached' ? cached : plain;
      const k = `k-${which}`;
      const req = { headers: { 'idempotency-key': k }, body: 'x' };
      const first = await send(`${proxy.url}/orders`, req);
      assert.equal(first.headers['x-settled'], 'true');
      const n = first.text().slice('live-'.length);
      assert.equal(first.text(), `live-${n}`);
      if (which === 'cached') {
        assert.equal(await redis.exists(cacheKey(prefix, 't', k)), 0, 'the proxy\'s copy of a settled row is not cached');
      }
      for (let i = 0; i < 3; i++) {
        const dup = await send(`${proxy.url}/orders`, req);
        assert.equal(dup.headers['idempotent-replayed'], 'true');
        assert.equal(dup.text(), `settled-${n}`, `duplicate ${i + 1}`);
      }
      if (which === 'cached') assert.equal(await redis.exists(cacheKey(prefix, 't', k)), 1, 'the replay from PostgreSQL refilled the cache with the settled record');
      assert.equal(upstream.received.filter((r) => r.headers['idempotency-key'] === k).length, 1);
    });
  }
});
