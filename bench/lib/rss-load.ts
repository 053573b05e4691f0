// The "1 000 open connections" load: opens `sockets` keep-alive sockets by
// sending that many requests at once, then sends a second round on the same
// (now idle) sockets, reports, and holds every socket open until told to stop.
import http from 'node:http';
import type { Socket } from 'node:net';
import type { RssOpenReport, RssSpec } from './types.js';

interface Round {
  status: Record<string, number>;
  errors: number;
  ms: number;
}

function post(agent: http.Agent, url: URL, spec: RssSpec, key: string, seen: Set<Socket>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        agent,
        host: url.hostname,
        port: url.port,
        method: 'POST',
        path: spec.path,
        timeout: 60_000,
        headers: { 'content-type': 'application/json', 'idempotency-key': key, 'content-length': Buffer.byteLength(spec.body) },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', reject);
      },
    );
    req.on('socket', (s) => seen.add(s));
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(spec.body);
  });
}

async function round(agent: http.Agent, url: URL, spec: RssSpec, tag: string, seen: Set<Socket>): Promise<Round> {
  const started = performance.now();
  const out: Round = { status: {}, errors: 0, ms: 0 };
  const settled = await Promise.allSettled(
    Array.from({ length: spec.sockets }, (_, i) => post(agent, url, spec, `${spec.keyPrefix}-${tag}-${i}`, seen)),
  );
  for (const s of settled) {
    if (s.status === 'fulfilled') out.status[s.value] = (out.status[s.value] ?? 0) + 1;
    else out.errors += 1;
  }
  out.ms = Math.round(performance.now() - started);
  return out;
}

/** Runs both rounds, writes the report line, and resolves once stdin closes. */
export async function holdOpenConnections(spec: RssSpec): Promise<void> {
  const url = new URL(spec.origin);
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: spec.sockets + 16 });
  const seen = new Set<Socket>();
  const rounds = [await round(agent, url, spec, 'a', seen), await round(agent, url, spec, 'b', seen)];
  let idle = 0;
  for (const list of Object.values(agent.freeSockets)) idle += list?.length ?? 0;
  const report: RssOpenReport = { phase: 'open', socketsOpened: seen.size, socketsIdleNow: idle, rounds };
  process.stdout.write(`${JSON.stringify(report)}\n`);
  await new Promise<void>((resolve) => {
    process.stdin.on('end', resolve);
    process.stdin.on('close', resolve);
    process.stdin.resume();
  });
  agent.destroy();
}
