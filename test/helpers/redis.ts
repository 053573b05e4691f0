import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';

// The machine's shared Redis, only ever touched under a unique key prefix.
// Tests that kill, stop or flush Redis start their own (servers.ts).

export const SHARED_REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const HOW_TO_START =
  'start it with: redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no ' +
  '--dir /var/lib/redis --logfile /var/log/redis/ci.log (or point TEST_REDIS_URL at a Redis you may write to)';

/** A client for assertions on the shared Redis; fails loudly (with the start command) if it is down. */
export async function sharedRedis(): Promise<Redis> {
  const client = new Redis(SHARED_REDIS_URL, { lazyConnect: true, connectTimeout: 2000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.ping();
  } catch (err) {
    client.disconnect();
    throw new Error(`Redis is not reachable at ${SHARED_REDIS_URL} (${(err as Error).message}); ${HOW_TO_START}`);
  }
  return client;
}

/** A key prefix no other test (or person) uses. No `{`/`}` and no glob characters. */
export function uniquePrefix(): string {
  return `idemtest:${Date.now().toString(36)}${randomBytes(4).toString('hex')}:`;
}

/** Deletes this test's keys (and only those) from the shared Redis. */
export async function deletePrefix(client: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
    if (keys.length > 0) await client.del(...keys);
    cursor = next;
  } while (cursor !== '0');
}
