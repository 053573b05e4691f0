import { randomUUID } from 'node:crypto';
import { Agent, request } from 'undici';
import { spawnProxy } from '../test/helpers/proxy.js';
import { createTestDatabase } from '../test/helpers/db.js';
import { startOrderService } from '../test/faults/helpers/order-service-process.js';

// What co-commit costs the proxy (docs/co-commit.md): new-key throughput
// through one spawned proxy in front of the same order service, whose
// business transaction (BEGIN, INSERT, COMMIT) either settles the key or
// not. The rounds alternate in one run, so both see the same machine.
// The proxy's own statements are the same in both (one claim, one commit per
// request); with settling, the commit finds the row complete and writes
// nothing.
//
//   npm run build && node dist/bench/co-commit.js [--requests 3000] [--connections 16] [--rounds 3]

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? dflt : Number(process.argv[i + 1]);
};
const REQUESTS = arg('requests', 3000);
const CONNECTIONS = arg('connections', 16);
const ROUNDS = arg('rounds', 3);

/** The proxy's claim and commit statements so far (its batch-size histogram's counts), and the operations in them. */
async function statements(adminUrl: string): Promise<Record<string, number>> {
  const text = await (await request(`${adminUrl}/metrics`)).body.text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^idempotency_proxy_store_batch_size_(count|sum)\{statement="(claim|commit)"\} (\S+)$/gm)) {
    out[`${m[2]}_${m[1] === 'count' ? 'statements' : 'rows'}`] = Number(m[3]);
  }
  for (const m of text.matchAll(/^idempotency_proxy_store_duration_seconds_count\{op="(\w+)"\} (\S+)$/gm)) out[`${m[1]}_ops`] = Number(m[2]);
  return out;
}

async function round(url: string, agent: Agent): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: CONNECTIONS }, async () => {
    while (next < REQUESTS) {
      next++;
      const r = await request(`${url}/orders`, {
        method: 'POST', dispatcher: agent, body: '{"amount":1}',
        headers: { 'idempotency-key': randomUUID(), 'content-type': 'application/json' },
      });
      await r.body.dump();
      if (r.statusCode !== 201) throw new Error(`status ${r.statusCode}`);
    }
  }));
  return REQUESTS / ((performance.now() - t0) / 1000);
}

const db = await createTestDatabase();
const svc = await startOrderService(db.url).catch(async (err) => { await db.drop(); throw err; });
const proxy = await spawnProxy(['serve', '--upstream', svc.url, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', '--database-url', db.url])
  .catch(async (err) => { await svc.close(); await db.drop(); throw err; });
const agent = new Agent({ connections: CONNECTIONS });
try {
  const rates: Record<'settle' | 'plain', number[]> = { settle: [], plain: [] };
  await svc.mode({ settle: false });
  await round(proxy.url, agent); // warm-up
  for (let i = 0; i < ROUNDS; i++) {
    const order: Array<'plain' | 'settle'> = i % 2 === 0 ? ['plain', 'settle'] : ['settle', 'plain'];
    for (const kind of order) {
      await svc.mode({ settle: kind === 'settle' });
      const before = await statements(proxy.adminUrl!);
      rates[kind].push(await round(proxy.url, agent));
      const after = await statements(proxy.adminUrl!);
      const per = Object.keys(after).sort().map((k) => `${k} ${((after[k]! - (before[k] ?? 0)) / REQUESTS).toFixed(3)}`).join(', ');
      console.log(`${kind.padEnd(6)} round ${i + 1}: per request: ${per}`);
    }
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  for (const kind of ['plain', 'settle'] as const) {
    console.log(`${kind.padEnd(6)} req/s per round: ${rates[kind].map((r) => r.toFixed(0)).join(', ')}  median ${median(rates[kind]).toFixed(0)}`);
  }
  console.log(`settle / plain (medians): ${(median(rates.settle) / median(rates.plain)).toFixed(3)}`);
} finally {
  await agent.close();
  await proxy.stop();
  await svc.close();
  await db.drop();
}
