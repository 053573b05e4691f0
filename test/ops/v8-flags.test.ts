// V8 settings `serve` makes for itself at start (src/v8-flags.ts), seen from
// outside: a real proxy process, loaded until V8 optimizes its hot code, with
// V8's own trace of what it compiles (--trace-opt). Maglev, V8's mid-tier
// compiler, is on by default in Node 24's V8 and off in Node 20's and 22's;
// the proxy turns it off on every one, so none of the code it runs once
// started is compiled by it.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { spawnProxy } from '../helpers/proxy.js';
import { startUpstream, type TestUpstream } from '../helpers/upstream.js';

describe('serve: V8\'s compilers', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;

  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(async (_req, _n, res) => { res.writeHead(200, { 'content-type': 'text/plain' }); res.end('ok'); });
  });
  after(async () => {
    await upstream?.close();
    await db?.drop();
  });

  test('under load, V8 optimizes the proxy\'s hot code with TurboFan and compiles nothing with Maglev', async () => {
    const p = await spawnProxy(['serve', '--upstream', upstream.url, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', '--database-url', db.url], {}, { nodeArgs: ['--trace-opt'] });
    try {
      // Pass-through requests, 20 at a time: enough calls for V8 to tier the request path up.
      let sent = 0;
      const worker = async (): Promise<void> => {
        while (sent < 3000) {
          sent += 1;
          const r = await send(`${p.url}/orders/${sent}`, { method: 'GET' });
          assert.equal(r.status, 200, r.text());
        }
      };
      await Promise.all(Array.from({ length: 20 }, worker));
    } finally {
      assert.equal(await p.stop(), 0);
    }
    // Node's module loader runs before any module of ours is evaluated (it resolves and links the whole graph
    // first), and on Node 24 Maglev compiles some of its functions then; from the proxy's first log line on,
    // every module of ours has run, src/v8-flags.ts first.
    const started = p.lines.findIndex((l) => l.startsWith('{'));
    assert.ok(started >= 0, 'the proxy logged');
    const compiled = p.lines.slice(started).filter((l) => l.startsWith('[compiling method'));
    const turbofan = compiled.filter((l) => /\(target TURBOFAN/.test(l));
    const maglev = compiled.filter((l) => /\(target MAGLEV/.test(l));
    assert.ok(turbofan.length > 0, `V8 traced what it compiled under load, TurboFan among it (${compiled.length} compilations)`);
    assert.deepEqual(maglev.slice(0, 5), [], `${maglev.length} functions compiled by Maglev once the proxy had started (node ${process.version})`);
  });
});
