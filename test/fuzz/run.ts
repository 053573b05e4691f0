// The at-most-once fuzzer (npm run test:fuzz; docs/guarantees.md, "Hostile
// clients and upstreams, at random"). Each round starts a real PostgreSQL
// database, one or two proxies (spawned through the CLI, so with their own
// event loops) and the scripted upstream, then fires groups of duplicates
// of one key at the same moment, a few groups at a time: each duplicate over
// HTTP/1.1 or h2c, whole, pipelined, with Expect: 100-continue, with another
// payload, or broken off; the upstream answers, releases, streams, resets or
// hangs past upstream.timeout. After each group two more duplicates follow
// in turn. The judge (judge.ts) then holds every answer against the
// upstream's record of what ran. Any finding, or an error the proxies log,
// fails the run.
//
//   npm run test:fuzz                         # seeds 1–8, 150 groups each
//   FUZZ_SEEDS=17,18 FUZZ_GROUPS=400 npm run test:fuzz
//
// The seed decides the round's set-up (profile, onInFlight, Redis, one or
// two proxies), each group's behaviour and each client's mode; timing does
// not repeat exactly, so a finding is reproduced by its seed most of the time,
// not always.
import { createTestDatabase, requirePostgres } from '../helpers/db.js';
import { spawnProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { SHARED_REDIS_URL, sharedRedis } from '../helpers/redis.js';
import { tempDir } from '../helpers/tmp.js';
import { MODES, Target, type Mode } from './clients.js';
import { judge, type Heard, type Rules } from './judge.js';
import { pick, rng, type Rng } from './rng.js';
import { BEHAVIOURS, ScriptedUpstream, UNKNOWN_OUTCOME, UPSTREAM_TIMEOUT_MS, type Behaviour } from './upstream.js';

const PROFILES = ['', 'stripe', '', 'ietf', 'acp'] as const;
const STATUSES = [200, 201, 400, 402, 409, 500, 503];
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// To chase a finding: FUZZ_BEHAVIOURS=early,ok FUZZ_MODES=undici,pipelined; FUZZ_PASSTHROUGH=1 (the share of
// groups sent to the pass-through route, a quarter by default; 0 for none).
const listOf = <T extends string>(v: string | undefined, all: readonly T[], what: string): readonly T[] | null => {
  if (v === undefined || v === '') return null;
  const items = v.split(',');
  const bad = items.filter((x) => !all.includes(x as T));
  if (bad.length > 0) throw new Error(`${what}: unknown ${bad.join(', ')} (known: ${[...new Set(all)].join(', ')})`);
  return items as T[];
};
const ONLY_BEHAVIOURS = listOf(process.env.FUZZ_BEHAVIOURS, BEHAVIOURS, 'FUZZ_BEHAVIOURS');
const ONLY_MODES = listOf(process.env.FUZZ_MODES, MODES, 'FUZZ_MODES');
const PASSTHROUGH_SHARE = Number(process.env.FUZZ_PASSTHROUGH || 0.25);
if (!(PASSTHROUGH_SHARE >= 0 && PASSTHROUGH_SHARE <= 1)) {
  throw new Error(`FUZZ_PASSTHROUGH: ${process.env.FUZZ_PASSTHROUGH} is not a share from 0 to 1`);
}

interface Round {
  readonly seed: number;
  readonly profile: typeof PROFILES[number];
  readonly onInFlight: 'conflict' | 'wait';
  readonly redis: boolean;
  readonly proxies: 1 | 2;
}

/** Any eight seeds in a row cover every profile, both onInFlight policies, with and without Redis, one and two proxies. */
function roundOf(seed: number): Round {
  return {
    seed,
    profile: PROFILES[seed % PROFILES.length]!,
    onInFlight: seed % 4 < 2 ? 'conflict' : 'wait',
    redis: seed % 2 === 0,
    proxies: seed % 3 === 1 ? 1 : 2,
  };
}

function yamlOf(round: Round, upstream: string, db: string): string {
  const p = round.profile;
  return [
    'listen: { address: 127.0.0.1:0, http2: true }',
    `upstream: { url: ${upstream}, timeout: ${UPSTREAM_TIMEOUT_MS}ms }`,
    `store: { postgres: "${db}"${round.redis ? `, redis: "${SHARED_REDIS_URL}"` : ''} }`,
    'defaults:',
    ...(p === '' ? [] : [`  profile: ${p}`]),
    '  tenant: { fromHeaderHash: authorization }',
    '  ttl: 48h', // ACP keeps keys at least 24 h
    '  lease: 30s',
    ...(p === '' ? [`  onInFlight: ${round.onInFlight}`, '  waitTimeout: 10s', '  fingerprint: { headers: [content-type], json: raw }'] : []),
    'routes:',
    '  - name: open',
    '    match: { path: /open/** }',
    '    mode: passthrough',
    '  - name: pay',
    '    match: { methods: [POST], path: /v1/** }',
    '    required: true',
    '',
  ].join('\n');
}

/** The route's releaseOn: the default, and ACP's 5xx besides. */
const rulesOf = (round: Round): Rules => ({
  releases: (s) => s === 401 || s === 403 || s === 429 || (round.profile === 'acp' && s >= 500),
});

/** Each pass-through group's path → its behaviour, to judge what the proxies logged. */
type Relayed = Map<string, Behaviour>;

async function group(g: number, r: Rng, round: Round, runId: string, targets: readonly Target[], upstream: ScriptedUpstream, relayed: Relayed): Promise<string[]> {
  // Neighbouring groups share a key under two tenants: a key is unique per tenant.
  const tenant = `Bearer sk_${g % 2 ? 'a' : 'b'}`;
  const key = `${runId}-${g >> 1}`;
  // FUZZ_PASSTHROUGH's share of the groups (a quarter by default) goes to the pass-through route: every duplicate
  // runs, and is relayed as it comes.
  const passthrough = r() < PASSTHROUGH_SHARE;
  // Its own path per group (neighbours share a key, not a path), so that each log line is judged by its own behaviour.
  const path = passthrough ? `/open/${runId}-g${g}` : '/v1/pay';
  const behaviour = pick(r, ONLY_BEHAVIOURS ?? BEHAVIOURS);
  if (passthrough) relayed.set(path, behaviour);
  const status = pick(r, STATUSES);
  const pad = behaviour === 'early' ? 'p'.repeat(600_000) : '';
  const body = Buffer.from(JSON.stringify({ key, behaviour, status, pad }));
  const other = Buffer.from(JSON.stringify({ key, behaviour, status, pad, other: true }));
  const headers: Record<string, string> = {
    authorization: tenant,
    // The IETF draft's key is a Structured Field string: quoted or bare, one key.
    'idempotency-key': round.profile === 'ietf' && g % 3 === 0 ? `"${key}"` : key,
    'content-type': 'application/json',
    'x-fuzz-behaviour': behaviour,
    'x-fuzz-status': String(status),
  };
  // On the pass-through route the path names the client's mode too, so that the proxies' log lines can be judged.
  const pathFor = (mode: Mode): string => (passthrough ? `${path}/${mode}` : path);
  const modes = Array.from({ length: 1 + Math.floor(r() * 6) }, () => pick(r, ONLY_MODES ?? MODES));
  const heard: Heard[] = [];
  await Promise.all(modes.map(async (mode) => {
    const target = pick(r, targets);
    // Another payload a moment later, so that it is not the one that claims the key.
    if (mode === 'other-payload') await sleep(50);
    const o = await target.send(mode, r, pathFor(mode), mode === 'other-payload' ? { ...headers, 'x-fuzz-other': '1' } : headers,
      mode === 'other-payload' ? other : body);
    for (const outcome of Array.isArray(o) ? o : [o]) heard.push({ mode, outcome });
  }));
  await sleep(300);
  for (let i = 0; i < 2; i++) {
    const mode: Mode = 'final';
    heard.push({ mode, outcome: await pick(r, targets).send(mode, r, pathFor(mode), headers, body) as Heard['outcome'] });
    await sleep(100);
  }
  return judge(`${tenant}|${key} (${passthrough ? 'pass-through, ' : ''}${behaviour})`, upstream.of(`${tenant}|${key}`), heard, rulesOf(round), passthrough);
}

/**
 * The proxies' logs: no error; and an `upstream_error` on the pass-through route only where the upstream did fail
 * (a client that leaves is its own doing: `passthrough`, with a detail).
 */
function judgeLog(lines: readonly string[], relayed: Relayed): string[] {
  const findings: string[] = [];
  for (const line of lines) {
    let j: { level?: number; outcome?: string; path?: string };
    try {
      j = JSON.parse(line) as typeof j;
    } catch {
      continue;
    }
    if ((j.level ?? 0) >= 50) findings.push(`a proxy logged an error: ${line.slice(0, 400)}`);
    const slash = j.path?.lastIndexOf('/') ?? -1;
    const behaviour = slash < 0 ? undefined : relayed.get(j.path!.slice(0, slash));
    if (j.outcome === 'upstream_error' && behaviour !== undefined && !UNKNOWN_OUTCOME.has(behaviour)) {
      findings.push(`upstream_error logged for a pass-through request whose upstream did not fail (${behaviour}, client ${j.path!.slice(slash + 1)}): ${line.slice(0, 400)}`);
    }
  }
  return findings;
}

async function runRound(round: Round, groups: number, parallel: number): Promise<string[]> {
  const r = rng(round.seed);
  const upstream = new ScriptedUpstream(r);
  await upstream.start();
  const db = await createTestDatabase();
  const dir = tempDir('idem-fuzz-');
  const proxies: SpawnedProxy[] = [];
  const targets: Target[] = [];
  const findings: string[] = [];
  try {
    const file = dir.write('proxy.yaml', yamlOf(round, upstream.url, db.url));
    for (let i = 0; i < round.proxies; i++) {
      const p = await spawnProxy(['serve', '--config', file, '--admin', 'off', '--log-level', 'info']);
      proxies.push(p);
      targets.push(new Target(p.url));
    }
    const runId = `fz${round.seed}-${Date.now().toString(36)}`;
    const relayed: Relayed = new Map();
    let next = 0;
    await Promise.all(Array.from({ length: parallel }, async () => {
      while (next < groups) findings.push(...await group(next++, r, round, runId, targets, upstream, relayed));
    }));
    for (const p of proxies) findings.push(...judgeLog(p.lines, relayed));
  } finally {
    await Promise.all(targets.map((t) => t.close()));
    await Promise.all(proxies.map((p) => p.stop()));
    await upstream.close();
    await db.drop();
    dir.remove();
  }
  return findings;
}

async function main(): Promise<void> {
  const seeds = (process.env.FUZZ_SEEDS ?? '1,2,3,4,5,6,7,8').split(',').map(Number);
  const groups = Number(process.env.FUZZ_GROUPS ?? 150);
  const parallel = Number(process.env.FUZZ_PARALLEL ?? 6);
  if (seeds.some((s) => !Number.isInteger(s)) || !(groups > 0) || !(parallel > 0)) {
    throw new Error('FUZZ_SEEDS is a comma-separated list of integers; FUZZ_GROUPS and FUZZ_PARALLEL are positive numbers');
  }
  await requirePostgres();
  (await sharedRedis()).disconnect();
  let failed = 0;
  for (const seed of seeds) {
    const round = roundOf(seed);
    const started = Date.now();
    const findings = await runRound(round, groups, parallel);
    const what = `seed ${seed}: profile ${round.profile || '(none)'}, ${round.profile === '' ? `onInFlight ${round.onInFlight}, ` : ''}` +
      `${round.proxies} ${round.proxies === 1 ? 'proxy' : 'proxies'}${round.redis ? ', Redis' : ''}; ${groups} groups in ${((Date.now() - started) / 1000).toFixed(0)} s`;
    process.stdout.write(`${findings.length === 0 ? 'ok' : 'FAILED'} ${what}\n`);
    for (const f of findings.slice(0, 40)) process.stdout.write(`  ${f}\n`);
    if (findings.length > 40) process.stdout.write(`  … and ${findings.length - 40} more\n`);
    if (findings.length > 0) failed++;
  }
  process.stdout.write(failed === 0 ? `all ${seeds.length} seeds held\n` : `${failed} of ${seeds.length} seeds found something\n`);
  if (failed > 0) process.exitCode = 1;
}

main().catch((err: Error) => {
  process.stderr.write(`test:fuzz: ${err.message}\n`);
  process.exitCode = 2;
});
