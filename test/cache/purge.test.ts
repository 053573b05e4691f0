import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { cacheKey } from '../../src/store/cache-codec.js';
import { defaultCachePrefix } from '../../src/store/redis-cache.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { runCli } from '../helpers/proxy.js';
import { tempDir, type TempDir } from '../helpers/tmp.js';
import { SHARED_REDIS_URL, sharedRedis } from '../helpers/redis.js';
import { sleep } from '../helpers/wait.js';

// keys purge removes the record and its cached copy. A proxy replaying the
// key from PostgreSQL just before the purge puts the record back into Redis
// right after it answers (the refill): the purge deletes the cached copy a
// second time, after that refill had time to land.

describe('keys purge and the Redis cache', () => {
  let db: TestDatabase;
  let redis: Redis;
  let dir: TempDir;
  let file: string;
  let cached: string;

  before(async () => {
    redis = await sharedRedis();
    db = await createTestDatabase();
    dir = tempDir('idem-purge-');
    file = dir.write('proxy.yaml', `upstream: { url: "http://127.0.0.1:9" }
store: { postgres: "${db.url}", redis: "${SHARED_REDIS_URL}" }
routes:
  - name: pay
    match: { path: "/pay/**" }
    tenant: { constant: t }
`);
    cached = cacheKey(defaultCachePrefix({ postgres: db.url, dataDir: '' }), 't', 'k-purged');
  });

  after(async () => {
    if (redis !== undefined) {
      await redis.del(cached);
      redis.disconnect();
    }
    dir?.remove();
    await db?.drop();
  });

  test('a cached copy written back between the deletions does not survive the purge', async () => {
    await sql(db.url, `INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, state, owner_token, attempt, on_expired_lease,
                         expires_at, created_at, completed_at, status_code, response_headers, response_body, body_retained, body_size)
                       VALUES ('t', 'k-purged', '\\x01'::bytea, 'complete', gen_random_uuid(), 1, 'reexecute',
                         now() + interval '1 hour', now(), now(), 201, '[]'::jsonb, '\\x7b7d'::bytea, true, 2)`);
    await redis.set(cached, 'a cached record', 'PX', 60_000);

    const purge = runCli(['keys', 'purge', '--config', file, '--key', 'k-purged', '--tenant-id', 't', '--yes']);
    let settled = false;
    void purge.finally(() => { settled = true; });
    // The first deletion...
    while ((await redis.exists(cached)) === 1 && !settled) await sleep(2);
    assert.equal(settled, false, 'the purge finished before its first deletion was seen');
    // ...then a refill from a replay that read the row before the purge.
    await redis.set(cached, 'a late refill', 'PX', 60_000);
    const r = await purge;
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /purged key "k-purged" \(was complete\)/);
    assert.match(r.stdout, /removed the cached copy from Redis/);
    assert.equal(await redis.exists(cached), 0, 'the late refill outlived the purge');
    assert.deepEqual(await sql(db.url, `SELECT idem_key FROM idempotency_keys WHERE idem_key = 'k-purged'`), []);
  });
});
