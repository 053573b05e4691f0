import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { GiveBacks } from '../../src/lifecycle/give-back.js';
import { createLogger } from '../../src/log/logger.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { createPgDb } from '../../src/store/db/pg.js';
import type { Db } from '../../src/store/db/port.js';
import { KeyStore } from '../../src/store/key-store.js';
import { migrate } from '../../src/store/migrate.js';
import type { ClaimRequest } from '../../src/store/records.js';
import { sql } from '../helpers/db.js';
import type { LogLine } from '../helpers/proxy.js';
import { startThrowawayPostgres, type ThrowawayPostgres } from '../helpers/servers.js';
import { sleep, waitFor } from '../helpers/wait.js';

// The queue of keys given back once the store answers again
// (src/lifecycle/give-back.ts), on a throwaway PostgreSQL this test stops and
// starts: 200 claims whose replies were lost, queued while the store is down.
// The queue waits as one while the store fails (a handful of statements, not
// a retry loop per key), then gives every key back one statement at a time,
// so that keys left by an outage never crowd the requests' own statements out
// of the pool as the store comes back.

/** A real KeyStore that counts its give-back statements and how many ran at once. */
class CountingStore extends KeyStore {
  calls = 0;
  running = 0;
  maxRunning = 0;

  override async abandon(tenantId: string, key: string, ownerToken: string): Promise<'released' | 'lease_ended' | 'none'> {
    this.calls += 1;
    this.maxRunning = Math.max(this.maxRunning, ++this.running);
    try {
      return await super.abandon(tenantId, key, ownerToken);
    } finally {
      this.running -= 1;
    }
  }
}

let pgc: ThrowawayPostgres;
let db: Db;

before(async () => {
  pgc = await startThrowawayPostgres();
  db = createPgDb({ connectionString: pgc.url, max: 4, timeoutMs: 1000 });
  await migrate(db);
});
after(async () => {
  await db?.close();
  await pgc?.destroy();
});

test('200 lost claims queued during an outage: a handful of tries while the store is down, then every key given back, one statement at a time', async () => {
  const store = new CountingStore(db);
  const claims: ClaimRequest[] = Array.from({ length: 200 }, (_, i) => ({
    tenantId: 't', key: `lost-${i}`, fingerprint: Buffer.alloc(32, 1), ownerToken: randomUUID(), leaseMs: 60_000, ttlMs: 3_600_000,
    onExpiredLease: 'fail', route: 'r', method: 'POST', path: '/p',
  }));
  for (const c of claims) assert.equal((await store.claim(c)).kind, 'claimed');
  const lines: LogLine[] = [];
  const logger = createLogger('info', { write: (s: string) => void lines.push(JSON.parse(s) as LogLine) });
  const giveBacks = new GiveBacks(store, null, logger, createMetrics({ processMetrics: false }));
  try {
    await pgc.stop('immediate');
    // As requests fail over a moment, not all at once: keys come due at different times, and still wait as one.
    for (const [i, c] of claims.entries()) {
      giveBacks.add('req', c, 'abandon');
      if (i % 20 === 19) await sleep(5);
    }
    await sleep(2500);
    const whileDown = store.calls;
    assert.ok(whileDown >= 2 && whileDown <= 10, `the queue tried a few times while the store was down, not once a key (${whileDown} statements)`);
    assert.equal(giveBacks.size, 200);

    await pgc.start();
    await waitFor('every key given back', async () => (await sql<{ n: number }>(pgc.url, 'SELECT count(*)::int AS n FROM idempotency_keys'))[0]!.n === 0, 20_000);
    assert.equal(store.maxRunning, 1, 'one statement at a time');
    assert.equal(lines.filter((l) => l.msg === 'a claim whose reply was lost was given back once the store answered' && l.result === 'released').length, 200);
    await waitFor('the queue to empty', () => giveBacks.size === 0);
  } finally {
    giveBacks.close();
  }
});
