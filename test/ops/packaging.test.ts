// Packaging, checked without Docker: the Dockerfile, docker-compose.yml, the
// Kubernetes manifests and the Grafana dashboard parse, and reference the
// ports, config keys, files, metrics and entry command the code really uses.
import { before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import picomatch from 'picomatch';
import { parse, parseAllDocuments } from 'yaml';
import { loadConfig } from '../../src/config/load.js';
import type { Config } from '../../src/config/types.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { NODE_FLAGS } from '../../src/node-flags.js';
import { MAIN } from '../helpers/proxy.js';
import { repoRoot } from './support.js';

const root = repoRoot();
const read = (rel: string): string => readFileSync(path.join(root, rel), 'utf8');
const exists = (rel: string): boolean => existsSync(path.join(root, rel));

/** The options `serve` accepts (src/cli/options.ts, src/cli/index.ts). */
const SERVE_FLAGS = new Set(['--config', '--database-url', '--upstream', '--listen', '--admin', '--redis-url', '--log-level']);

/** `['serve', '--config', 'f', '--upstream', 'u']` → command and flags. */
function serveArgs(args: readonly string[]): { command: string; flags: Map<string, string> } {
  const flags = new Map<string, string>();
  for (let i = 1; i < args.length; i += 2) {
    assert.ok(SERVE_FLAGS.has(args[i]!), `unknown serve flag ${args[i]}`);
    assert.ok(args[i + 1] !== undefined, `${args[i]} has no value`);
    flags.set(args[i]!, args[i + 1]!);
  }
  return { command: args[0]!, flags };
}

function configFrom(text: string, flags: Map<string, string>, env: Record<string, string>): Config {
  return loadConfig({
    text,
    flags: {
      upstream: flags.get('--upstream') ?? null,
      listen: flags.get('--listen') ?? null,
      admin: flags.get('--admin') ?? null,
      databaseUrl: flags.get('--database-url') ?? null,
      redisUrl: flags.get('--redis-url') ?? null,
    },
    env,
  });
}

/** The configuration an image started with no file and no flags but --upstream gets. */
const defaults = (): Config => loadConfig({ flags: { upstream: 'http://127.0.0.1:3000' }, env: {} });

interface Instruction {
  readonly stage: number;
  readonly op: string;
  readonly args: string;
}

function parseDockerfile(text: string): Instruction[] {
  const joined = text.replace(/\\\r?\n/g, ' ');
  const out: Instruction[] = [];
  let stage = -1;
  for (const raw of joined.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const [, op, args] = /^(\S+)\s*(.*)$/.exec(line)!;
    if (op!.toUpperCase() === 'FROM') stage++;
    out.push({ stage, op: op!.toUpperCase(), args: args!.replace(/\s+/g, ' ').trim() });
  }
  return out;
}

describe('Dockerfile', () => {
  let steps: Instruction[];
  let last: number;
  const final = (op: string) => steps.filter((s) => s.stage === last && s.op === op);
  before(() => {
    steps = parseDockerfile(read('Dockerfile'));
    last = Math.max(...steps.map((s) => s.stage));
  });

  test('multi-stage on node:24-slim (an LTS line): npm ci, build, prune dev dependencies', () => {
    const froms = steps.filter((s) => s.op === 'FROM');
    assert.ok(froms.length >= 2, 'at least a build and a runtime stage');
    for (const f of froms) assert.match(f.args, /^node:24-slim\b/);
    const run = steps.filter((s) => s.stage === 0 && s.op === 'RUN').map((s) => s.args).join(' && ');
    assert.match(run, /npm ci\b/);
    assert.match(run, /npm run build\b/);
    assert.match(run, /npm prune --omit=dev\b/);
    const pkg = JSON.parse(read('package.json')) as { scripts: Record<string, string>; bin: Record<string, string> };
    assert.ok(pkg.scripts.build, 'package.json has the build script the image runs');
    assert.ok(final('COPY').every((c) => c.args.includes('--from=build')), 'the runtime stage copies only build outputs');
  });

  test('every file the build copies exists and is not excluded by .dockerignore', () => {
    const ignored = read('.dockerignore').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'));
    const isIgnored = (rel: string) => ignored.some((p) => picomatch(p, { dot: true })(rel));
    for (const c of steps.filter((s) => s.op === 'COPY' && !s.args.includes('--from='))) {
      const parts = c.args.split(' ').filter((p) => !p.startsWith('--'));
      for (const src of parts.slice(0, -1)) {
        assert.ok(exists(src), `COPY ${src}: not in the repository`);
        assert.ok(!isIgnored(src), `COPY ${src}: excluded by .dockerignore`);
      }
    }
    for (const needed of ['test', 'node_modules', 'dist', '.git']) assert.ok(isIgnored(needed), `.dockerignore should exclude ${needed}`);
  });

  test('no `# syntax=` line: BuildKit needs no frontend image from a registry', () => {
    assert.doesNotMatch(read('Dockerfile'), /^#\s*syntax\s*=/im);
  });

  test('non-root by number, the default ports exposed, a healthcheck that reads the configuration', () => {
    const users = final('USER');
    assert.equal(users.length, 1);
    assert.match(users[0]!.args, /^\d+:\d+$/, 'a numeric uid:gid, so Kubernetes can verify runAsNonRoot');
    assert.notEqual(users[0]!.args.split(':')[0], '0', 'runs as a non-root user');
    const c = defaults();
    const exposed = final('EXPOSE').flatMap((e) => e.args.split(' ')).map(Number);
    assert.ok(exposed.includes(c.listen.port), `EXPOSE ${c.listen.port} (listen)`);
    assert.ok(exposed.includes(c.admin!.port), `EXPOSE ${c.admin!.port} (admin)`);
    const hc = final('HEALTHCHECK')[0]!.args;
    const cmd = JSON.parse(hc.slice(hc.indexOf('CMD ') + 4)) as string[];
    const serve = JSON.parse(final('CMD')[0]!.args) as string[];
    // The same entry script and the same file as the default command's serve.
    assert.deepEqual(cmd, ['node', JSON.parse(final('ENTRYPOINT')[0]!.args).at(-1), 'healthcheck', '--config', serve[serve.indexOf('--config') + 1]]);
  });

  test('the entry command is the CLI the tests run: node NODE_FLAGS dist/src/main.js', () => {
    const entry = JSON.parse(final('ENTRYPOINT')[0]!.args) as string[];
    assert.deepEqual(entry, ['node', ...NODE_FLAGS, 'dist/src/main.js']);
    // MAIN is <outDir>/src/main.js; the image's outDir is dist (tsconfig.json).
    const outDir = path.resolve(path.dirname(MAIN), '..');
    assert.equal(`dist/${path.relative(outDir, MAIN).split(path.sep).join('/')}`, entry.at(-1));
    const tsconfig = JSON.parse(read('tsconfig.json')) as { compilerOptions: { outDir: string; rootDir: string } };
    assert.equal(tsconfig.compilerOptions.outDir, 'dist');
    assert.equal(tsconfig.compilerOptions.rootDir, '.');
    const pkg = JSON.parse(read('package.json')) as { bin: Record<string, string> };
    assert.equal(pkg.bin['idempotency-proxy'], entry.at(-1));
    const cmd = JSON.parse(final('CMD')[0]!.args) as string[];
    assert.deepEqual(cmd, ['serve', '--config', '/etc/idempotency-proxy/config.yaml']);
    serveArgs(cmd);
  });
});

describe('docker-compose.yml', () => {
  type Service = {
    image?: string; build?: string; command?: string[]; environment?: Record<string, string>;
    volumes?: string[]; ports?: string[]; expose?: string[]; depends_on?: Record<string, unknown>; stop_grace_period?: string;
  };
  let services: Record<string, Service>;
  before(() => {
    services = (parse(read('docker-compose.yml')) as { services: Record<string, Service> }).services;
  });

  test('proxy, PostgreSQL 15, Redis 7 and the demo upstream from docker/', () => {
    assert.deepEqual(Object.keys(services).sort(), ['postgres', 'proxy', 'redis', 'upstream']);
    assert.equal(services.postgres!.image, 'postgres:15');
    assert.equal(services.redis!.image, 'redis:7');
    assert.equal(services.proxy!.build, '.');
    assert.ok(exists('Dockerfile'));
    assert.match(services.upstream!.build!, /^\.\/docker\//);
    const up = path.join(services.upstream!.build!);
    assert.ok(exists(path.join(up, 'Dockerfile')));
    const upCmd = JSON.parse(parseDockerfile(read(path.join(up, 'Dockerfile'))).find((s) => s.op === 'CMD')!.args) as string[];
    assert.ok(exists(path.join(up, upCmd.at(-1)!)), `the upstream image runs ${upCmd.join(' ')}`);
    assert.deepEqual(Object.keys(services.proxy!.depends_on ?? {}).sort(), ['postgres', 'redis', 'upstream']);
  });

  test('the proxy command, its config file and environment make a valid configuration wired to the other services', () => {
    const proxy = services.proxy!;
    const { command, flags } = serveArgs(proxy.command!);
    assert.equal(command, 'serve');
    const mount = proxy.volumes!.map((v) => /^\$\{PROXY_CONFIG:-([^}]+)\}:([^:]+)(:ro)?$/.exec(v)).find((m) => m !== null)!;
    assert.ok(mount, 'the config file is mounted (default ./docker/proxy.yaml, PROXY_CONFIG overrides)');
    assert.equal(mount[2], flags.get('--config'), 'mounted where --config points');
    assert.ok(exists(mount[1]!), `${mount[1]} exists`);
    const config = configFrom(read(mount[1]!), flags, proxy.environment!);

    const containerPorts = proxy.ports!.map((p) => Number(p.split(':').at(-1)));
    assert.ok(containerPorts.includes(config.listen.port), `port ${config.listen.port} (listen) is published`);
    assert.ok(config.admin !== null && containerPorts.includes(config.admin.port), 'the admin port is published');
    assert.equal(config.admin!.host, '0.0.0.0', 'admin reachable through the published port');

    const pg = new URL(config.store.postgres!);
    const pgEnv = services.postgres!.environment!;
    assert.equal(pg.hostname, 'postgres');
    assert.equal(pg.port, '5432');
    assert.equal(decodeURIComponent(pg.username), pgEnv.POSTGRES_USER);
    assert.equal(decodeURIComponent(pg.password), pgEnv.POSTGRES_PASSWORD);
    assert.equal(pg.pathname, `/${pgEnv.POSTGRES_DB}`);
    assert.equal(new URL(config.store.redis!).hostname, 'redis');
    const upstream = new URL(config.upstream.url);
    assert.equal(upstream.hostname, 'upstream');
    assert.equal(upstream.port, services.upstream!.environment!.PORT);
    assert.ok(services.upstream!.expose!.includes(upstream.port));
    const grace = Number(/^(\d+)s$/.exec(proxy.stop_grace_period!)![1]) * 1000;
    assert.ok(grace > config.shutdownTimeoutMs, 'compose waits longer than the proxy drains');
  });

  test('every example policy in config/ runs in the compose stack too (PROXY_CONFIG=./config/…)', () => {
    const proxy = services.proxy!;
    const { flags } = serveArgs(proxy.command!);
    const files = readdirSync(path.join(root, 'config')).filter((f) => f.endsWith('.yaml'));
    assert.ok(files.length > 0, 'config/ has example policies');
    for (const f of files) {
      const config = configFrom(read(path.join('config', f)), flags, proxy.environment!);
      assert.equal(new URL(config.upstream.url).hostname, 'upstream', `${f}: the compose --upstream wins`);
      assert.equal(config.listen.port, 8080, f);
      assert.equal(config.admin?.port, 9090, f);
      assert.equal(new URL(config.store.postgres!).hostname, 'postgres', `${f}: DATABASE_URL from compose`);
    }
  });
});

describe('deploy/kubernetes', () => {
  type Obj = { kind: string; metadata: { name: string; labels?: Record<string, string> }; [k: string]: any };
  let objs: Obj[];
  const one = (kind: string): Obj => {
    const found = objs.filter((o) => o.kind === kind);
    assert.equal(found.length, 1, `one ${kind}`);
    return found[0]!;
  };
  before(() => {
    const kustomization = parse(read('deploy/kubernetes/kustomization.yaml')) as { resources: string[] };
    objs = kustomization.resources.flatMap((file) =>
      parseAllDocuments(read(path.join('deploy/kubernetes', file))).map((d) => {
        assert.deepEqual(d.errors, [], `${file} parses`);
        return d.toJS() as Obj;
      }).filter((o) => o !== null));
  });

  test('a sidecar Deployment, ConfigMap, Service and PodDisruptionBudget', () => {
    assert.deepEqual(objs.map((o) => o.kind).sort(), ['ConfigMap', 'Deployment', 'PodDisruptionBudget', 'Service']);
    const pod = one('Deployment').spec.template.spec;
    assert.deepEqual(pod.containers.map((c: Obj) => c.name).sort(), ['app', 'proxy']);
  });

  test('the ConfigMap policies load, and the pod wires them: mount, env, ports, probes, upstream', () => {
    const deployment = one('Deployment');
    const pod = deployment.spec.template.spec;
    const proxy = pod.containers.find((c: Obj) => c.name === 'proxy');
    const app = pod.containers.find((c: Obj) => c.name === 'app');
    const { command, flags } = serveArgs(proxy.args);
    assert.equal(command, 'serve');
    assert.equal(proxy.command, undefined, 'the image ENTRYPOINT (node dist/src/main.js) runs');

    // --config → volume mount → ConfigMap key
    const file = flags.get('--config')!;
    const mount = proxy.volumeMounts.find((m: Obj) => file.startsWith(`${m.mountPath}/`));
    assert.ok(mount, `${file} is on a mounted volume`);
    const volume = pod.volumes.find((v: Obj) => v.name === mount.name);
    const cm = one('ConfigMap');
    assert.equal(volume.configMap.name, cm.metadata.name);
    const item = volume.configMap.items.find((i: Obj) => `${mount.mountPath}/${i.path}` === file);
    assert.ok(item, 'the mounted item is the file --config names');
    const text = cm.data[item.key] as string;

    // Every ${VAR} the policies use is set on the container.
    const vars = [...text.matchAll(/\$\{([A-Z_][A-Z0-9_]*)/g)].map((m) => m[1]!);
    const env = new Map<string, Obj>(proxy.env.map((e: Obj) => [e.name, e]));
    for (const v of vars) assert.ok(env.has(v), `${v} is set on the proxy container`);
    const config = configFrom(text, flags, Object.fromEntries(vars.map((v) => [v, v === 'DATABASE_URL' ? 'postgres://u:p@db:5432/idem' : v === 'REDIS_URL' ? 'redis://cache:6379' : 'token'])));

    const port = (name: string) => proxy.ports.find((p: Obj) => p.name === name).containerPort as number;
    assert.equal(port('http'), config.listen.port);
    assert.equal(port('admin'), config.admin!.port);
    assert.equal(config.admin!.host, '0.0.0.0', 'the kubelet probes the pod IP, not loopback');
    assert.ok(config.adminToken !== null, 'the admin token guards /metrics');
    for (const [probe, p] of [['livenessProbe', '/healthz'], ['readinessProbe', '/readyz'], ['startupProbe', '/readyz']] as const) {
      assert.equal(proxy[probe].httpGet.path, p, `${probe} path`);
      assert.equal(proxy[probe].httpGet.port, 'admin', `${probe} on the admin port`);
    }
    const upstream = new URL(config.upstream.url);
    assert.ok(['127.0.0.1', 'localhost'].includes(upstream.hostname), 'the upstream is the app container in the same pod');
    assert.equal(Number(upstream.port), app.ports[0].containerPort);

    for (const c of [proxy, app]) {
      assert.ok(c.resources?.limits?.cpu && c.resources?.limits?.memory, `${c.name} has resource limits`);
      assert.ok(c.resources?.requests?.cpu && c.resources?.requests?.memory, `${c.name} has resource requests`);
    }
    assert.equal(pod.securityContext.runAsNonRoot, true);
    // preStop + drain fit in the grace period; the app outlives the proxy's drain.
    const sleep = (c: Obj) => Number(c.lifecycle?.preStop?.exec?.command?.[1] ?? 0) * 1000;
    assert.ok(sleep(proxy) + config.shutdownTimeoutMs < pod.terminationGracePeriodSeconds * 1000);
    assert.ok(sleep(app) >= sleep(proxy) + config.shutdownTimeoutMs, 'the app stops after the proxy has drained');
    assert.ok(config.shutdownTimeoutMs >= config.upstream.timeoutMs, 'a request started before SIGTERM can finish');
  });

  test('the Service sends traffic to the proxy, the PodDisruptionBudget selects the pods', () => {
    const labels = one('Deployment').spec.template.metadata.labels as Record<string, string>;
    const matches = (selector: Record<string, string>) => Object.entries(selector).every(([k, v]) => labels[k] === v);
    const svc = one('Service');
    assert.ok(matches(svc.spec.selector));
    const http = svc.spec.ports.find((p: Obj) => p.name === 'http');
    assert.equal(http.targetPort, 'http', 'to the proxy, not the app');
    const pdb = one('PodDisruptionBudget');
    assert.ok(matches(pdb.spec.selector.matchLabels));
    assert.ok(pdb.spec.maxUnavailable !== undefined || pdb.spec.minAvailable !== undefined);
    assert.ok(matches(one('Deployment').spec.selector.matchLabels));
  });
});

describe('metrics in the dashboard and the docs', () => {
  let names: Set<string>;
  let own: string[];
  before(async () => {
    const metrics = createMetrics();
    const json = await metrics.registry.getMetricsAsJSON();
    names = new Set(json.map((m) => m.name));
    own = [...names].filter((n) => !/^idempotency_proxy_(process|nodejs)_/.test(n));
  });

  test('every expression of deploy/grafana/dashboard.json uses metrics that exist, and every proxy metric is on it', () => {
    const dash = JSON.parse(read('deploy/grafana/dashboard.json')) as { panels: Array<{ title: string; targets?: Array<{ expr: string }> }> };
    const exprs = dash.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ title: p.title, expr: t.expr })));
    assert.ok(exprs.length > 10);
    const used = new Set<string>();
    for (const { title, expr } of exprs) {
      for (const m of expr.matchAll(/\bidempotency_proxy_[a-z0-9_]+/g)) {
        const base = m[0].replace(/_(bucket|sum|count)$/, '');
        assert.ok(names.has(m[0]) || names.has(base), `panel "${title}": ${m[0]} is not a metric of the proxy`);
        used.add(names.has(m[0]) ? m[0] : base);
      }
    }
    assert.deepEqual(own.filter((n) => !used.has(n)), [], 'metrics missing from the dashboard');
  });

  test('the dashboard\'s panels have ids of their own and do not overlap (Grafana would merge or move them on import)', () => {
    type Panel = { id: number; title: string; gridPos: { x: number; y: number; w: number; h: number } };
    const panels = (JSON.parse(read('deploy/grafana/dashboard.json')) as { panels: Panel[] }).panels;
    const ids = panels.map((p) => p.id);
    assert.deepEqual(ids.filter((id, i) => ids.indexOf(id) !== i), [], 'panel ids used twice');
    const overlaps: string[] = [];
    for (const [i, a] of panels.entries()) {
      for (const b of panels.slice(i + 1)) {
        const g = a.gridPos;
        const h = b.gridPos;
        if (g.x < h.x + h.w && h.x < g.x + g.w && g.y < h.y + h.h && h.y < g.y + g.h) overlaps.push(`"${a.title}" and "${b.title}"`);
      }
    }
    assert.deepEqual(overlaps, [], 'panels placed over each other');
  });

  test('docs/operations.md explains every proxy metric', () => {
    const doc = read('docs/operations.md');
    const rows = new Set([...doc.matchAll(/^\| `(idempotency_proxy_[a-z0-9_]+)` \|/gm)].map((m) => m[1]!));
    assert.deepEqual(own.filter((n) => !rows.has(n)), []);
    assert.deepEqual([...rows].filter((n) => !names.has(n)), [], 'documented metrics that do not exist');
  });
});
