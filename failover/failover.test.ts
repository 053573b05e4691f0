import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { request } from 'undici';
import type { RunningProxy } from '../src/app.js';
import { answer, startControlledUpstream, type ControlledUpstream } from '../test/faults/helpers/controlled-upstream.js';
import { sql as query } from '../test/helpers/db.js';
import { startTestProxy as startInProcess } from '../test/helpers/proxy.js';
import { sleep } from '../test/helpers/wait.js';
import { startSwitch, startSyncPair, type Switch, type SyncPair } from './cluster.js';

// A failover under load (npm run test:failover; not in npm test). A primary
// with a synchronous standby, the proxy reaching it through a TCP switch (the
// read-write endpoint), a steady load of new keys and replays. The primary
// is killed with SIGKILL, the standby promoted, the switch pointed at it.
// Shown: the proxy recovers without a restart; every key a client got a 2xx
// for is complete on the new primary with the bytes the client got; no key
// ran twice; and how long there was no service.

const YAML = `
store: { poolSize: 4, timeout: 2s }
defaults:
  lease: 5s
  tenant: { fromHeader: x-tenant }
routes:
  - name: orders
    match: { path: "/orders/**" }
`;
const TICK_MS = 10;
const KILL_AT_MS = 4000;
/** Between the kill and the promotion: the failure detection of Patroni & co. (its ttl), shortened. */
const DETECT_MS = 2000;
const LOAD_AFTER_KILL_MS = 8000;
/** After the load stops, keys not yet acknowledged are retried for this long. */
const SETTLE_MS = 30_000;

interface Acked { key: string; status: number; body: Buffer }
interface Event { start: number; at: number; status: number | 'network' }

async function post(url: string, key: string): Promise<{ status: number | 'network'; body: Buffer; replayed: boolean }> {
  try {
    const r = await request(`${url}/orders/${key}`, {
      method: 'POST',
      headers: { 'idempotency-key': key, 'x-tenant': 't', 'content-type': 'application/json' },
      body: JSON.stringify({ key, amount: key.length }),
      signal: AbortSignal.timeout(40_000),
    });
    const body = Buffer.from(await r.body.arrayBuffer());
    return { status: r.statusCode, body, replayed: r.headers['idempotent-replayed'] === 'true' };
  } catch {
    return { status: 'network', body: Buffer.alloc(0), replayed: false };
  }
}

describe('failover of a synchronous primary under load', () => {
  let pair: SyncPair;
  let sw: Switch;
  let up: ControlledUpstream;
  let proxy: RunningProxy;

  before(async () => {
    pair = await startSyncPair();
    sw = await startSwitch(pair.primary.port);
    up = await startControlledUpstream(answer(201, 20));
    proxy = await startInProcess({ upstream: up.url, databaseUrl: `postgres://postgres@127.0.0.1:${sw.port}/postgres`, yaml: YAML });
  });
  after(async () => {
    await proxy?.close();
    await up?.close();
    await sw?.close();
    await pair?.destroy();
  });

  test('SIGKILL of the primary, standby promoted: recovery without restart, every 2xx complete with its bytes, nothing ran twice', async (t) => {
    const t0 = performance.now();
    const now = (): number => performance.now() - t0;
    const acked = new Map<string, Acked>();
    const events: Event[] = [];
    const badReplays: string[] = [];
    const unsettled: string[] = [];
    let loadEnds = Infinity;
    let settleEnds = Infinity;

    // Open loop, as clients do not wait for each other: a new key every
    // TICK_MS (retried with the same key until it gets its 2xx) and a replay of
    // an acknowledged key every third tick.
    const newKey = async (key: string): Promise<void> => {
      for (;;) {
        const start = now();
        const r = await post(proxy.url, key);
        events.push({ start, at: now(), status: r.status });
        if (r.status === 201) {
          acked.set(key, { key, status: r.status, body: r.body });
          return;
        }
        if (now() > settleEnds) {
          unsettled.push(`${key}: ${r.status}`);
          return;
        }
        await sleep(100); // 503 / 409 / cut: retry the same key, as a client would
      }
    };
    const replay = async (k: Acked): Promise<void> => {
      const start = now();
      const r = await post(proxy.url, k.key);
      events.push({ start, at: now(), status: r.status });
      if (r.status === 201 && (!r.replayed || !r.body.equals(k.body))) badReplays.push(k.key);
    };
    const load = (async () => {
      const tasks: Promise<void>[] = [];
      for (let i = 0; now() < loadEnds; i++) {
        tasks.push(newKey(`k${i}`));
        const known = [...acked.values()];
        if (i % 3 === 2 && known.length > 0) tasks.push(replay(known[(i * 7) % known.length]!));
        await sleep(TICK_MS);
      }
      await Promise.all(tasks);
    })();

    await sleep(KILL_AT_MS);
    await pair.killPrimary();
    const killedAt = now();
    await assert.rejects(query(pair.primary.url, 'SELECT 1'), 'the primary is gone');
    await sleep(DETECT_MS);
    await pair.promoteStandby();
    const promotedAt = now();
    sw.switchTo(pair.standby.port);
    const switchedAt = now();
    loadEnds = killedAt + LOAD_AFTER_KILL_MS;
    settleEnds = loadEnds + SETTLE_MS;
    await load;

    // Service is back when a request sent after the kill gets its 2xx.
    const firstOkAfter = events.filter((e) => e.start > killedAt && e.status === 201).sort((a, b) => a.at - b.at)[0];
    assert.ok(firstOkAfter !== undefined, 'the proxy served again after the failover, without a restart');
    const oks = events.filter((e) => e.status === 201).map((e) => e.at).sort((a, b) => a - b);
    let gapMs = 0;
    for (let i = 1; i < oks.length; i++) gapMs = Math.max(gapMs, oks[i]! - oks[i - 1]!);
    const longestWait = Math.max(...events.filter((e) => e.status === 201).map((e) => e.at - e.start));
    const count = (s: Event['status']): number => events.filter((e) => e.status === s).length;
    t.diagnostic(`kill → promoted ${Math.round(promotedAt - killedAt)} ms (${DETECT_MS} ms of it failure detection), switched ${Math.round(switchedAt - killedAt)} ms`);
    t.diagnostic(`first 2xx to a request sent after the kill: ${Math.round(firstOkAfter.at - killedAt)} ms after the kill, ${Math.round(firstOkAfter.at - switchedAt)} ms after the switch; longest time with no 2xx: ${Math.round(gapMs)} ms; longest wait for a 2xx: ${Math.round(longestWait)} ms`);
    t.diagnostic(`${acked.size} keys acknowledged; answers: ${count(201)} × 201, ${count(503)} × 503, ${count(409)} × 409, ${count('network')} cut`);

    assert.deepEqual(unsettled, [], 'every key got its 2xx once the new primary served');
    assert.deepEqual(badReplays, [], 'replays carry the bytes of the first answer');
    // Against the new primary, directly.
    const rows = await query<{ idem_key: string; state: string; status_code: number; response_body: Buffer }>(pair.standby.url,
      'SELECT idem_key, state, status_code, response_body FROM idempotency_keys WHERE idem_key = ANY($1)', [[...acked.keys()]]);
    const byKey = new Map(rows.map((r) => [r.idem_key, r]));
    const lost: string[] = [];
    for (const a of acked.values()) {
      const r = byKey.get(a.key);
      if (r === undefined || r.state !== 'complete' || r.status_code !== a.status || !Buffer.from(r.response_body).equals(a.body)) lost.push(a.key);
    }
    assert.deepEqual(lost, [], 'every acknowledged key is complete on the new primary with the bytes the client got');
    const twice = [...acked.keys()].filter((k) => up.executions(k) !== 1);
    const anyTwice = up.exchanges.map((e) => e.key).filter((k, i, all) => k !== undefined && all.indexOf(k) !== i);
    assert.deepEqual(twice, [], 'every acknowledged key ran exactly once');
    assert.deepEqual(anyTwice, [], 'no key ran twice');
  });
});
