// Layer 1 — client retry → API key. The client sends an Idempotency-Key; the
// proxy claims it, runs the payment once and replays the answer to a retry
// (the first answer "lost" on the way back). docs/chain.md
import { check, startProxy, startUpstream } from './lib/stack.mjs';

let executions = 0;
const upstream = await startUpstream((req, res) => {
  executions++;
  res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ payment: `pay_${executions}` }));
});
const proxy = await startProxy(upstream.url, 'routes:\n  - name: payments\n    match: { methods: [POST], path: /v1/payments }\n    required: true\n');
try {
  const send = () => fetch(`${proxy.url}/v1/payments`, {
    method: 'POST', headers: { 'idempotency-key': 'order-42-payment', 'content-type': 'application/json' }, body: '{"amount":100}',
  });
  const first = await send(); // imagine this answer never reached the client
  const retry = await send();
  check(first.status === 201 && retry.status === 201, 'both attempts answered 201');
  check(retry.headers.get('idempotent-replayed') === 'true', 'the retry is the replay');
  check((await first.text()) === (await retry.text()), 'the same payment in both answers');
  check(executions === 1, 'the payment ran once');
} finally {
  await proxy.stop();
  await upstream.close();
}
