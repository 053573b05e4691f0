// Starts what the HTTP examples need: an upstream (a request handler of the
// example's own) and the proxy in front of it, as `idempotency-proxy serve`
// from this checkout (npm run build first), on DATABASE_URL.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const MAIN = fileURLToPath(new URL('../../../dist/src/main.js', import.meta.url));

export function databaseUrl() {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('set DATABASE_URL to a PostgreSQL database (e.g. postgres://postgres@127.0.0.1:5432/idem)');
  return url;
}

/** An upstream on 127.0.0.1:<free port>. */
export async function startUpstream(handler) {
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => Promise.resolve(handler(req, res, Buffer.concat(chunks))).catch((err) => {
      res.writeHead(500).end(String(err));
    }));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}

/** The proxy (a child process) in front of `upstream`, configured by `yaml`. */
export async function startProxy(upstream, yaml) {
  const dir = mkdtempSync(path.join(tmpdir(), 'idem-example-'));
  const file = path.join(dir, 'proxy.yaml');
  writeFileSync(file, yaml);
  const proc = spawn(process.execPath, [MAIN, 'serve', '--config', file, '--upstream', upstream,
    '--listen', '127.0.0.1:0', '--admin', 'off', '--database-url', databaseUrl()], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((resolve, reject) => {
    let buf = '';
    proc.stdout.on('data', (d) => {
      buf += d;
      for (let i; (i = buf.indexOf('\n')) !== -1; buf = buf.slice(i + 1)) {
        try {
          const line = JSON.parse(buf.slice(0, i));
          if (line.msg === 'proxy listening') resolve(line.url);
        } catch { /* not JSON */ }
      }
    });
    proc.once('exit', (code) => reject(new Error(`the proxy exited with ${code}`)));
  });
  return { url, stop: () => new Promise((r) => { proc.once('exit', r); proc.kill('SIGTERM'); }) };
}

export function check(ok, what) {
  if (!ok) throw new Error(`example failed: ${what}`);
  console.log(`ok: ${what}`);
}
