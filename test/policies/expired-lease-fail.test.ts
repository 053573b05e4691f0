// onExpiredLease: fail — a proxy is SIGKILLed while the upstream runs; once
// its lease expires the key becomes outcome_unknown: retries get a 409 with
// their own problem type and never reach the upstream, waitFor an operator
// inspects the record (keys show) and releases it (keys purge --yes).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type http from 'node:http';
import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { runCli, spawnProxy, startTestProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { problemType } from './support.js';
import { tempDir, type TempDir } from '../helpers/tmp.js';
import { waitFor } from '../helpers/wait.js';

const AUTH = 'Bearer sk_test_51Hx';
const KEY = 'capture-7f3a';

function routes(): string {
  return `
routes:
  - name: captures
    match: { methods: [POST], path: /v1/captures/** }
    lease: 1s
    onExpiredLease: fail
    # tenant: the default, a SHA-256 of the Authorization header
`;
}

describe('onExpiredLease: fail', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let dir: TempDir;
  let file: string;
  let crashed: SpawnedProxy | null = null;
  let survivor: RunningProxy;
  const held: http.ServerResponse[] = [];
  const capture = (url: string, body = '{"payment":"pi_1","amount":500}') =>
    send(`${url}/v1/captures/pi_1`, { headers: { authorization: AUTH, 'content-type': 'application/json', 'idempotency-key': KEY }, body });
  const cli = (...args: string[]) => runCli(['keys', ...args, '--config', file]);

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream((req, n, res) => {
      if (n === 1) {
        held.push(res); // the first capture never answers: its proxy dies meanwhile
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
${routes()}`);
  });
  after(async () => {
    await crashed?.kill();
    await survivor?.close();
    for (const r of held) r.destroy();
    await upstream?.close();
    await db?.drop();
    dir?.remove();
  });

  test('SIGKILL mid-request, lease expiry: outcome-unknown 409 waitFor keys purge --yes', async () => {
    crashed = await spawnProxy(['serve', '--config', file]);
    const inFlight = capture(crashed.url).catch((err: Error) => err);
    await waitFor('the upstream to receive the capture', () => upstream.executions() === 1, 5000);
    await crashed.kill();
    assert.ok((await inFlight) instanceof Error, 'the client of the crashed proxy got no answer');

    await waitFor('the lease to expire', async () => (await sql<{ gone: boolean }>(db.url, 'SELECT locked_until <= now() AS gone FROM idempotency_keys'))[0]?.gone === true, 5000);
    survivor = await startTestProxy({ upstream: upstream.url, databaseUrl: db.url, yaml: routes() });

    for (let i = 0; i < 3; i++) {
      const retry = await capture(survivor.url);
      assert.equal(retry.status, 409);
      assert.equal(problemType(retry), 'outcome-unknown');
      assert.equal(retry.json().type, 'urn:idempotency-proxy:problem:outcome-unknown');
      assert.match(retry.json().detail, /keys purge/);
      assert.equal(retry.headers['idempotent-replayed'], undefined);
    }
    // A different payload under the key is still a mismatch, not a way around.
    const other = await capture(survivor.url, '{"payment":"pi_1","amount":999}');
    assert.equal(other.status, 422);
    assert.equal(upstream.executions(), 1, 'no retry reached the upstream');

    // keys show: the tenant as the request carried it; hashed the same way.
    const shown = await cli('show', '--tenant', AUTH, '--key', KEY);
    assert.equal(shown.code, 0, shown.stderr);
    const rec = JSON.parse(shown.stdout) as Record<string, unknown>;
    assert.equal(rec.state, 'outcome_unknown');
    assert.equal(rec.key, KEY);
    assert.equal(rec.route, 'captures');
    assert.equal(rec.request, 'POST /v1/captures/pi_1');
    assert.equal(rec.onExpiredLease, 'fail');
    assert.equal(rec.status, null);
    for (const t of ['createdAt', 'lockedUntil', 'expiresAt']) assert.ok(!Number.isNaN(Date.parse(String(rec[t]))), `${t}: ${rec[t]}`);
    assert.ok(!('bodyBase64' in rec), 'no body unless --body');
    assert.ok(!shown.stdout.includes(AUTH), 'the raw credential is never printed');
    const withBody = JSON.parse((await cli('show', '--tenant', AUTH, '--key', KEY, '--body')).stdout) as Record<string, unknown>;
    assert.ok('bodyBase64' in withBody);

    const refused = await cli('purge', '--tenant', AUTH, '--key', KEY);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /--yes/);
    assert.equal((await capture(survivor.url)).status, 409, 'still outcome unknown after a refused purge');

    const purged = await cli('purge', '--tenant', AUTH, '--key', KEY, '--yes');
    assert.equal(purged.code, 0, purged.stderr);
    assert.match(purged.stdout, /purged/);
    assert.match(purged.stdout, /outcome_unknown/);

    const next = await capture(survivor.url);
    assert.equal(next.status, 201);
    assert.equal(next.headers['idempotent-replayed'], undefined);
    assert.equal(upstream.executions(), 2, 'the retry after the purge ran the operation');
    const replay = await capture(survivor.url);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.equal(upstream.executions(), 2);
  });
});
