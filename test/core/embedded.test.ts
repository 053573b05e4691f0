import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { send, type Reply } from '../helpers/http.js';
import { spawnProxy, startTestProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { assertProblem, header, uniqueKey } from './support.js';
import { tempDir } from '../helpers/tmp.js';

// docs/contract.md, Storage (the embedded store) and Command line: `serve --upstream URL` with no config
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

  test('execute and replay; restarts on the same dataDir (with `serve --upstream` alone) keep the replay', async () => {
    const key = uniqueKey('emb');
    const opts = { headers: { 'idempotency-key': key }, body: 'persist me' };
    const dataDir = path.join(cwd.dir, '.idempotency-proxy', 'data');

    // 1. In-process, creating the data directory (the slow initdb runs here, with no start timeout).
    const proxy = await startTestProxy({ upstream: upstream.url, databaseUrl: null, dataDir });
    let first: Reply;
    try {
      assert.equal(proxy.db.singleInstance, true);
      first = await send(`${proxy.url}/pay`, opts);
      assert.equal(first.status, 201);
      const replay = await send(`${proxy.url}/pay`, opts);
      assert.equal(header(replay, 'idempotent-replayed'), 'true');
      assert.ok(replay.body.equals(first.body));
      assertProblem(await send(`${proxy.url}/pay`, { ...opts, body: 'other' }), 'key-mismatch', 422);
    } finally {
      await proxy.close();
    }

    // 2. The CLI with nothing but --upstream (and free ports), in that working directory:
    //    it opens ./.idempotency-proxy/data by default, and the record survived the restart.
    const key2 = uniqueKey('emb2');
    const proc = await spawnProxy(['serve', '--upstream', upstream.url, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0'], {}, { cwd: cwd.dir });
    try {
      assert.ok(proc.lines.some((l) => /single-instance only/.test(l)), 'the startup log says single-instance only');
      const replay = await send(`${proc.url}/pay`, opts);
      assert.equal(header(replay, 'idempotent-replayed'), 'true');
      assert.ok(replay.body.equals(first.body));
      const second = await send(`${proc.url}/pay`, { headers: { 'idempotency-key': key2 }, body: 'b' });
      assert.equal(second.status, 201);
      assert.equal(second.headers['idempotent-replayed'], undefined);
    } finally {
      assert.equal(await proc.stop(), 0, 'a clean shutdown on SIGTERM');
    }
    assert.ok(existsSync(dataDir));
    assert.equal(upstream.executions(), 2, 'nothing ran twice');
  });
});
