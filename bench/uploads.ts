import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { NODE_FLAGS } from '../src/node-flags.js';
import { createTestDatabase } from '../test/helpers/db.js';
import { spawnProxy } from '../test/helpers/proxy.js';
import { startUpstream } from '../test/helpers/upstream.js';

// Peak RSS under hundreds of concurrent multi-megabyte uploads
// (limits.maxBufferedBytes, docs/operations.md, Sizing): the proxy with its
// default budget on a route that buffers bodies (maxBodyBytes 8MiB), and the
// bare pass-through baseline (bench/baseline.ts, which streams), each fresh,
// each in front of the same upstream, in one run. Each gets the same waves of
// uploads; a refused upload (503 overloaded) is retried until it succeeds.
//
//   npm run build && node dist/bench/uploads.js [--uploads 200] [--mib 6] [--budget 256MiB]

const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? dflt : process.argv[i + 1]!;
};
const UPLOADS = Number(arg('uploads', '200'));
const SIZE = Number(arg('mib', '6')) * 1024 * 1024;
const BUDGET = arg('budget', '256MiB');
const here = path.dirname(fileURLToPath(import.meta.url));

const vmHwmMiB = (pid: number): number => Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

async function baseline(upstream: string): Promise<{ url: string; pid: number; stop(): void }> {
  const proc = spawn(process.execPath, [...NODE_FLAGS, path.join(here, 'baseline.js'), '--upstream', upstream], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise<string>((resolve, reject) => {
    proc.stdout!.once('data', (d: Buffer) => resolve((JSON.parse(d.toString()) as { url: string }).url));
    proc.once('exit', (code) => reject(new Error(`baseline exited ${code}`)));
  });
  return { url, pid: proc.pid!, stop: () => proc.kill('SIGTERM') };
}

/** Every upload once, all at the same moment; the refused ones again, 20 at a time, until none is refused. */
async function waves(url: string, label: string): Promise<{ ok: number; refusedFirst: number; other: number; seconds: number }> {
  const agent = new Agent({ connections: UPLOADS });
  const body = Buffer.alloc(SIZE, 7);
  const send = async (k: string): Promise<number> => {
    const r = await request(`${url}/upload`, { method: 'POST', dispatcher: agent, body, headers: { 'idempotency-key': `${label}-${k}`, 'content-type': 'application/octet-stream' } });
    await r.body.dump();
    return r.statusCode;
  };
  const t0 = performance.now();
  const keys = Array.from({ length: UPLOADS }, (_, i) => String(i));
  const first = await Promise.all(keys.map(send));
  let pending = keys.filter((_, i) => first[i] === 503);
  const refusedFirst = pending.length;
  const other = first.filter((s) => s !== 201 && s !== 200 && s !== 503).length;
  while (pending.length > 0) {
    const next: string[] = [];
    for (let i = 0; i < pending.length; i += 20) {
      const batch = pending.slice(i, i + 20);
      const st = await Promise.all(batch.map(send));
      batch.forEach((k, j) => { if (st[j] === 503) next.push(k); });
    }
    pending = next;
  }
  await agent.close();
  return { ok: UPLOADS, refusedFirst, other, seconds: (performance.now() - t0) / 1000 };
}

const db = await createTestDatabase();
const up = await startUpstream(async (_req, _n, res) => {
  await new Promise((r) => setTimeout(r, 50));
  res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}');
});
const rows: string[] = [];
try {
  const b = await baseline(up.url);
  try {
    const w = await waves(b.url, 'baseline');
    rows.push(`| baseline (streams) | ${vmHwmMiB(b.pid).toFixed(0)} | ${w.refusedFirst} | ${w.other} | ${w.seconds.toFixed(1)} |`);
  } finally {
    b.stop();
  }
  const { writeFileSync, mkdtempSync } = await import('node:fs');
  const dir = mkdtempSync(path.join((await import('node:os')).tmpdir(), 'idem-uploads-'));
  const config = path.join(dir, 'proxy.yaml');
  writeFileSync(config, `logLevel: warn\nlimits: { maxBufferedBytes: ${BUDGET} }\nroutes:\n  - name: uploads\n    match: { path: "/**" }\n    maxBodyBytes: 8MiB\n`);
  const p = await spawnProxy(['serve', '--config', config, '--upstream', up.url, '--database-url', db.url, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', '--log-level', 'info'], {}, { nodeArgs: NODE_FLAGS });
  try {
    const w = await waves(p.url, 'proxy');
    rows.push(`| proxy, limits.maxBufferedBytes ${BUDGET} | ${vmHwmMiB(p.proc.pid!).toFixed(0)} | ${w.refusedFirst} | ${w.other} | ${w.seconds.toFixed(1)} |`);
  } finally {
    await p.stop();
  }
} finally {
  await up.close();
  await db.drop();
}
process.stdout.write(`\n${UPLOADS} concurrent uploads of ${SIZE / 1048576} MiB, refused ones retried 20 at a time until done\n\n` +
  `| server | peak RSS (MiB) | refused at first (503) | other statuses | seconds |\n|---|---|---|---|---|\n${rows.join('\n')}\n`);
