import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Agent, type Dispatcher } from 'undici';
import { IdempotentClient } from '../../src/client/index.js';
import { reply, startServer, type TestServer } from './helpers/http-server.js';

describe("a caller's undici dispatcher", () => {
  let server: TestServer;
  let agent: Agent;
  let dispatcher: Dispatcher;
  const dispatched: string[] = [];

  before(async () => {
    server = await startServer((seen, res) => reply(res, seen.index === 0 ? 503 : 200, { index: seen.index }));
    agent = new Agent();
    // An interceptor, to see that every attempt went through the caller's dispatcher.
    dispatcher = agent.compose((dispatch) => (opts, handler) => {
      dispatched.push(`${opts.method} ${opts.path}`);
      return dispatch(opts, handler);
    });
  });
  after(async () => {
    await agent.close();
    await server.close();
  });

  test('carries every attempt, and is left open by client.close()', async () => {
    const client = new IdempotentClient({ baseUrl: server.url, dispatcher, baseDelayMs: 5 });
    const res = await client.post('/via-agent');
    assert.equal(res.attempts, 2);
    assert.deepEqual(dispatched, ['POST /via-agent', 'POST /via-agent']);
    await client.close();
    assert.equal(agent.closed, false);
    const direct = await dispatcher.request({ origin: server.url, path: '/still-open', method: 'GET' });
    await direct.body.dump();
    assert.equal(direct.statusCode, 200);
  });
});
