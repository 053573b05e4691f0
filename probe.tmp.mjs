import { spawn } from 'node:child_process';
import pg from 'pg';
import { Pool } from 'undici';
const [dbUrl] = process.argv.slice(2);
const up = spawn(process.execPath, ['dist/bench/upstream.js', '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
const upUrl = await new Promise((r) => up.stdout.once('data', (d) => r(JSON.parse(d.toString()).url)));
const px = spawn(process.execPath, ['dist/src/main.js', 'serve', '--config', '/tmp/proxy-citus.yaml', '--database-url', dbUrl, '--log-level', 'info'], { env: { ...process.env, BENCH_UPSTREAM_URL: upUrl }, stdio: ['ignore', 'pipe', 'inherit'] });
const pxUrl = await new Promise((r) => { let b = ''; px.stdout.on('data', (d) => { b += d; const m = b.match(/"url":"(http[^"]+)"/); if (m) r(m[1]); }); });
const c = new pg.Client({ connectionString: dbUrl }); await c.connect();
const stat = async () => (await c.query(`SELECT sum(calls)::int AS n FROM pg_stat_user_tables`).catch(() => ({ rows: [{}] }))).rows[0];
const xact = async () => Number((await c.query(`SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`)).rows[0].xact_commit);
const pool = new Pool(pxUrl, { connections: 1 });
const x0 = await xact();
const lat = [];
for (let i = 0; i < 300; i++) {
  const t0 = performance.now();
  const r = await pool.request({ method: 'POST', path: '/bench/x', body: '{}', headers: { 'content-type': 'application/json', 'idempotency-key': `p-${Date.now()}-${i}`, 'x-tenant': `tenant-${i % 16}` } });
  await r.body.text(); lat.push(performance.now() - t0);
  if (r.statusCode !== 200) console.log('status', r.statusCode);
}
await new Promise((r) => setTimeout(r, 600));
const x1 = await xact();
lat.sort((a, b) => a - b);
console.log('p50', lat[150].toFixed(2), 'xacts/request', ((x1 - x0) / 300).toFixed(2));
await pool.close(); await c.end(); px.kill(); up.kill();
