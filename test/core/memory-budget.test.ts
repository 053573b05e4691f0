import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { spawnProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { tempDir } from '../helpers/tmp.js';

// limits.maxBufferedBytes (docs/configuration.md): hundreds of concurrent
// multi-megabyte uploads on a route that buffers them, with the default
// budget (256 MiB). The proxy runs as its own process so its peak resident
// memory (VmHWM) is its own. Every answer is a 2xx or a 503 overloaded with
// Retry-After; nothing runs twice; every refused upload succeeds when
// retried; the peak stays under 600 MiB (376 MiB measured; 990 MiB with the
// budget set out of reach, and no refusal).

const UPLOADS = 200;
const SIZE = 6 * 1024 * 1024;
const PEAK_LIMIT_MIB = 600;

const vmHwmMiB = (pid: number): number => {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  assert.ok(m, 'VmHWM in /proc/<pid>/status');
  return Number(m[1]) / 1024;
};

describe('memory under hundreds of concurrent multi-megabyte uploads', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let proxy: SpawnedProxy;
  const dir = tempDir('idem-budget-');
  const byKey = new Map<string, number>();
  const agent = new Agent({ connections: UPLOADS, keepAliveTimeout: 1000 });
  before(async () => {
    db = await createTestDatabase();
    // Reads each body whole, then answers after a short while, so uploads pile up in the proxy.
    upstream = await startUpstream(async (req, _n, res) => {
      const key = String(req.headers['idempotency-key']);
      byKey.set(key, (byKey.get(key) ?? 0) + 1);
      await new Promise((r) => setTimeout(r, 50));
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ key, bytes: req.body.length }));
    });
    const config = join(dir.dir, 'proxy.yaml');
    writeFileSync(config, 'routes:\n  - name: uploads\n    match: { path: "/**" }\n    maxBodyBytes: 8MiB\n');
    proxy = await spawnProxy(['serve', '--config', config, '--upstream', upstream.url, '--database-url', db.url, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0'],
      {}, { nodeArgs: ['--max-semi-space-size=4'] });
  });
  after(async () => {
    await proxy?.stop();
    await agent.close();
    await upstream.close();
    await db.drop();
    dir.remove();
  });

  const upload = async (key: string, body: Buffer): Promise<{ status: number; retryAfter: string | undefined; type: string | undefined }> => {
    const r = await request(`${proxy.url}/upload`, { method: 'POST', dispatcher: agent, headers: { 'idempotency-key': key, 'content-type': 'application/octet-stream' }, body });
    const text = await r.body.text();
    const type = r.statusCode === 503 ? (JSON.parse(text) as { type?: string }).type : undefined;
    return { status: r.statusCode, retryAfter: r.headers['retry-after'] as string | undefined, type };
  };

  test('every answer is a 2xx or 503 + Retry-After, nothing runs twice, refused uploads succeed on retry, the peak stays bounded', async () => {
    const body = Buffer.alloc(SIZE, 7);
    const keys = Array.from({ length: UPLOADS }, (_, i) => `up-${i}`);
    const first = await Promise.all(keys.map((k) => upload(k, body)));
    const refused: string[] = [];
    let overloaded = 0;
    first.forEach((r, i) => {
      if (r.status === 201) return;
      assert.equal(r.status, 503, `upload ${i}: a 2xx or a 503, got ${r.status}`);
      // overloaded: the budget; store-unavailable: a claim past store.timeout on a machine this busy.
      assert.ok(r.type === 'urn:idempotency-proxy:problem:overloaded' || r.type === 'urn:idempotency-proxy:problem:store-unavailable', `upload ${i}: ${r.type}`);
      assert.ok(Number(r.retryAfter) >= 1, 'Retry-After');
      if (r.type === 'urn:idempotency-proxy:problem:overloaded') overloaded++;
      refused.push(keys[i]!);
    });
    assert.ok(overloaded > 0, `the budget was reached (${UPLOADS} × 6 MiB against 256 MiB)`);
    for (const k of refused) assert.equal(byKey.get(k), undefined, `refused ${k} never reached the upstream`);
    // Retried, a few at a time, as clients honouring Retry-After would.
    for (let i = 0; i < refused.length; i += 20) {
      const again = await Promise.all(refused.slice(i, i + 20).map((k) => upload(k, body)));
      for (const r of again) assert.equal(r.status, 201);
    }
    for (const k of keys) assert.equal(byKey.get(k), 1, `${k} ran exactly once`);
    const peak = vmHwmMiB(proxy.proc.pid!);
    assert.ok(peak < PEAK_LIMIT_MIB, `peak RSS ${peak.toFixed(0)} MiB < ${PEAK_LIMIT_MIB} MiB`);
    process.stderr.write(`# memory budget: ${refused.length}/${UPLOADS} refused at first, peak RSS ${peak.toFixed(0)} MiB\n`);
  });
});
