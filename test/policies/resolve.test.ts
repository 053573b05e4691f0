// Resolving outcome_unknown keys after a real crash: a proxy is SIGKILLed
// while the upstream runs four captures on an onExpiredLease: fail route.
// Once the leases run out, the admin API and the CLI list those keys and
// resolve them: `executed` — every retry replays "operation executed; its
// response was not recorded" and the operation never runs again;
// `not_executed` — the key is freed and the retry runs the operation once.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type http from 'node:http';
import type { RunningProxy } from '../../src/app.js';
import { tenantIdFor } from '../../src/policy/tenant.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import { runCli, spawnProxy, startTestProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { tempDir, type TempDir } from '../helpers/tmp.js';
import { waitFor } from '../helpers/wait.js';
import { problemType } from './support.js';

const AUTH = 'Bearer sk_test_resolve';
const TENANT = tenantIdFor({ kind: 'fromHeaderHash', header: 'authorization' }, AUTH);
const TOKEN = 'resolve-admin-token';
const KEYS = ['cap-api-executed', 'cap-api-not-executed', 'cap-cli-executed', 'cap-cli-not-executed'] as const;
const ROUTES = `
routes:
  - name: captures
    match: { methods: [POST], path: /v1/captures/** }
    lease: 1s
    onExpiredLease: fail
`;

describe('resolving outcome_unknown keys after a crash', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let dir: TempDir;
  let file: string;
  let crashed: SpawnedProxy | null = null;
  let survivor: RunningProxy;
  const held: http.ServerResponse[] = [];
  const capture = (url: string, key: string): Promise<Reply> =>
    send(`${url}/v1/captures/${key}`, { headers: { authorization: AUTH, 'content-type': 'application/json', 'idempotency-key': key }, body: `{"capture":"${key}"}` });
  const adminCall = (path: string, method = 'GET', body?: string): Promise<Reply> =>
    send(`${survivor.adminUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body }),
    });
  const resolvePath = (key: string) => `/admin/keys/${TENANT}/${encodeURIComponent(key)}/resolve`;
  const cli = (...args: string[]) => runCli(['keys', ...args, '--config', file]);
  const ranFor = (key: string) => upstream.received.filter((r) => r.url === `/v1/captures/${key}`).length;

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream((_req, n, res) => {
      if (n <= KEYS.length) {
        held.push(res); // the first captures never answer: their proxy dies meanwhile
        return;
      }
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ captured: true, execution: n }));
    });
    dir = tempDir();
    file = dir.write('strict.yaml', `listen: 127.0.0.1:0
admin: off
upstream: { url: "${upstream.url}" }
store: { postgres: "${db.url}" }
${ROUTES}`);
    crashed = await spawnProxy(['serve', '--config', file]);
    const inFlight = KEYS.map((k) => capture(crashed!.url, k).catch((err: Error) => err));
    await waitFor('the upstream to receive every capture', () => upstream.executions() === KEYS.length, 5000);
    await crashed.kill();
    for (const r of await Promise.all(inFlight)) assert.ok(r instanceof Error, 'the clients of the crashed proxy got no answer');
    await waitFor('the leases to expire', async () => (await sql<{ n: string }>(db.url, 'SELECT count(*) AS n FROM idempotency_keys WHERE locked_until <= now()'))[0]?.n === String(KEYS.length), 5000);
    survivor = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: `adminToken: ${TOKEN}\n${ROUTES}` });
  });
  after(async () => {
    await crashed?.kill();
    await survivor?.close();
    for (const r of held) r.destroy();
    await upstream?.close();
    await db?.drop();
    dir?.remove();
  });

  test('the crashed keys are listed as outcome_unknown before any retry, by the API and the CLI', async () => {
    const page = (await adminCall('/admin/keys?state=outcome_unknown')).json() as { keys: Array<{ key: string; storedState: string; route: string }>; next: string | null };
    assert.deepEqual(page.keys.map((k) => k.key).sort(), [...KEYS].sort());
    assert.ok(page.keys.every((k) => k.storedState === 'in_flight' && k.route === 'captures'), 'in flight with a dead lease on a fail route');
    assert.equal(page.next, null);
    const listed = await cli('list', '--state', 'outcome_unknown', '--tenant', AUTH);
    assert.equal(listed.code, 0, listed.stderr);
    for (const k of KEYS) assert.match(listed.stdout, new RegExp(`"${k}"`));
    assert.equal(listed.stdout.trim().split('\n').length, KEYS.length);
    const json = JSON.parse((await cli('list', '--state', 'in_flight', '--json')).stdout) as { keys: unknown[] };
    assert.equal(json.keys.length, 0, 'not in flight: their outcome is unknown');
  });

  test('API: executed — the retry replays "executed, response not recorded", the operation never runs again', async () => {
    const key = KEYS[0];
    const r = await adminCall(resolvePath(key), 'POST', '{"as":"executed"}');
    assert.equal(r.status, 200, r.text());
    assert.equal(r.json().resolved, 'executed');
    assert.equal(r.json().record.state, 'complete');
    for (let i = 0; i < 3; i++) {
      const retry = await capture(survivor.url, key);
      assert.equal(retry.status, 409);
      assert.equal(retry.headers['idempotent-replayed'], 'true');
      assert.equal(problemType(retry), 'executed-unrecorded');
      assert.equal(retry.json().originalStatus, null);
      assert.match(retry.json().detail, /ran, but its response was not recorded/);
    }
    assert.equal(ranFor(key), 1, 'the operation ran once, before the crash');
    const again = await adminCall(resolvePath(key), 'POST', '{"as":"not_executed"}');
    assert.equal(again.status, 409, 'a resolved key cannot be resolved again');
    assert.equal(again.json().state, 'complete');
  });

  test('API: not_executed — the key is freed, the retry runs the operation once', async () => {
    const key = KEYS[1];
    const r = await adminCall(resolvePath(key), 'POST', '{"as":"not_executed"}');
    assert.equal(r.status, 200, r.text());
    const retry = await capture(survivor.url, key);
    assert.equal(retry.status, 201);
    assert.equal(retry.headers['idempotent-replayed'], undefined);
    const replay = await capture(survivor.url, key);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.equal(ranFor(key), 2, 'once before the crash, once after the resolution');
  });

  test('CLI: keys resolve --as executed on a key a retry already marked outcome_unknown', async () => {
    const key = KEYS[2];
    const blocked = await capture(survivor.url, key);
    assert.equal(problemType(blocked), 'outcome-unknown');
    assert.equal((await sql(db.url, 'SELECT state FROM idempotency_keys WHERE idem_key = $1', [key]))[0]?.state, 'outcome_unknown');
    const r = await cli('resolve', '--tenant', AUTH, '--key', key, '--as', 'executed');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /resolved key "cap-cli-executed" as executed/);
    const audit = JSON.parse(r.stderr.trim().split('\n').pop()!) as Record<string, unknown>;
    assert.equal(audit.op, 'resolve');
    assert.equal(audit.as, 'executed');
    assert.ok(typeof (audit.who as Record<string, unknown>).user === 'string');
    const retry = await capture(survivor.url, key);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.equal(problemType(retry), 'executed-unrecorded');
    assert.equal(ranFor(key), 1);
  });

  test('CLI: keys resolve --as not_executed, then the retry runs once; bad input names the flag', async () => {
    const key = KEYS[3];
    const noAs = await cli('resolve', '--tenant', AUTH, '--key', key);
    assert.equal(noAs.code, 2);
    assert.match(noAs.stderr, /as/);
    const badState = await cli('list', '--state', 'stuck');
    assert.equal(badState.code, 2);
    assert.match(badState.stderr, /--state: unknown state "stuck"/);
    const badTenant = await cli('list', '--tenant-id', 'nobody');
    assert.equal(badTenant.code, 2);
    assert.match(badTenant.stderr, /--tenant-id: no record is stored under tenant id "nobody"/);
    const badAge = await cli('list', '--older-than', 'soon');
    assert.match(badAge.stderr, /--older-than: /);

    const r = await cli('resolve', '--tenant', AUTH, '--key', key, '--as', 'not_executed');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /the key is free/);
    const retry = await capture(survivor.url, key);
    assert.equal(retry.status, 201);
    assert.equal(ranFor(key), 2);
    const missing = await cli('resolve', '--tenant', AUTH, '--key', key, '--as', 'not_executed');
    assert.notEqual(missing.code, 0, 'a key that is not outcome_unknown any more is not resolved');
    assert.equal((await capture(survivor.url, key)).headers['idempotent-replayed'], 'true');
    assert.equal(ranFor(key), 2);

    const left = await cli('list', '--state', 'outcome_unknown');
    assert.equal(left.code, 0);
    assert.equal(left.stdout, '', 'no outcome_unknown key left');
  });
});
