import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { send, type Reply } from '../helpers/http.js';
import { spawnProxy, startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { assertProblem, header, tempDir, uniqueKey } from './support.js';

// SPEC §3 "Embedded default" and §5: `serve --upstream URL` with no config
// and no database URL runs the same store code on PGlite in
// ./.idempotency-proxy/data, says it is single-instance only, and the data
// survives restarts. One data directory for the whole file: creating one
// (initdb in WebAssembly) costs seconds.

describe('embedded store end to end', () => {
  let cwd: ReturnType<typeof tempDir>;
  let upstream: TestUpstream;
  before(async () => {
    cwd = tempDir('idem-embedded-');
    upstream = await startUpstream(jsonResponder(201));
  });
  after(async () => {
    await upstream.close();
    cwd.remove();
  });

  test('serve --upstream alone: execute and replay; then restarts on the same dataDir keep the replay', async () => {
    const key = uniqueKey('emb');
    const opts = { headers: { 'idempotency-key': key }, body: 'persist me' };
    let first: Reply;

    // 1. The CLI with nothing but --upstream (and free ports), in an empty directory.
    const proc = await spawnProxy(['serve', '--upstream', upstream.url, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0'], {}, { cwd: cwd.dir });
    try {
      assert.ok(proc.lines.some((l) => /single-instance only/.test(l)), 'the startup log says single-instance only');
      first = await send(`${proc.url}/pay`, opts);
      assert.equal(first.status, 201);
      const replay = await send(`${proc.url}/pay`, opts);
      assert.equal(header(replay, 'idempotent-replayed'), 'true');
      assert.ok(replay.body.equals(first.body));
    } finally {
      assert.equal(await proc.stop(), 0, 'a clean shutdown on SIGTERM');
    }
    const dataDir = path.join(cwd.dir, '.idempotency-proxy', 'data');
    assert.ok(existsSync(dataDir), 'the data directory defaults to ./.idempotency-proxy/data');

    // 2. In-process on the same directory: the record survived the restart.
    let proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: null, dataDir });
    const key2 = uniqueKey('emb2');
    let second: Reply;
    try {
      assert.equal(proxy.db.singleInstance, true);
      const replay = await send(`${proxy.url}/pay`, opts);
      assert.equal(header(replay, 'idempotent-replayed'), 'true');
      assert.ok(replay.body.equals(first.body));
      assertProblem(await send(`${proxy.url}/pay`, { ...opts, body: 'other' }), 'key-mismatch', 422);
      second = await send(`${proxy.url}/pay`, { headers: { 'idempotency-key': key2 }, body: 'b' });
      assert.equal(second.status, 201);
    } finally {
      await proxy.close();
    }

    // 3. Close and reopen once more: both records replay, nothing ran twice.
    proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: null, dataDir });
    try {
      const r1 = await send(`${proxy.url}/pay`, opts);
      const r2 = await send(`${proxy.url}/pay`, { headers: { 'idempotency-key': key2 }, body: 'b' });
      for (const r of [r1, r2]) assert.equal(header(r, 'idempotent-replayed'), 'true');
      assert.ok(r1.body.equals(first.body));
      assert.ok(r2.body.equals(second.body));
      assert.equal(upstream.executions(), 2);
    } finally {
      await proxy.close();
    }
  });
});
