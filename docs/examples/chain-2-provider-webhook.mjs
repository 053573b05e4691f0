// Layer 2 — provider retry → gateway event id. A payment provider redelivers
// a webhook until it gets a 2xx; the event's own id is the key (key: fromBody).
// docs/chain.md
import { check, startProxy, startUpstream } from './lib/stack.mjs';

const handled = [];
const upstream = await startUpstream((req, res, body) => {
  handled.push(JSON.parse(body.toString()).id);
  res.writeHead(200, { 'content-type': 'application/json' }).end('{"received":true}');
});
const proxy = await startProxy(upstream.url, [
  'routes:',
  '  - name: psp-webhooks',
  '    match: { methods: [POST], path: /webhooks/psp }',
  '    key: { fromBody: /id }',
  '    tenant: { constant: psp }',
  '',
].join('\n'));
try {
  const deliver = () => fetch(`${proxy.url}/webhooks/psp`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: 'evt_1', type: 'payment.succeeded', amount: 100 }),
  });
  const answers = [await deliver(), await deliver(), await deliver()]; // the provider's retries
  check(answers.every((a) => a.status === 200), 'every delivery acknowledged');
  check(handled.length === 1 && handled[0] === 'evt_1', 'the event was handled once');
} finally {
  await proxy.stop();
  await upstream.close();
}
