import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import net, { type AddressInfo } from 'node:net';
import type { TracingConfig } from '../../src/config/types.js';
import { UndiciOtlpTransport } from '../../src/tracing/otlp-http.js';
import { startTracing } from '../../src/tracing/start.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { send } from '../helpers/http.js';
import { metric, metricsText } from '../helpers/metrics.js';
import { startReceiver, type Receiver, type ReceiverOptions } from '../helpers/otlp.js';
import { spawnProxy, type SpawnedProxy } from '../helpers/proxy.js';
import { jsonResponder, startUpstream, type TestUpstream } from '../helpers/upstream.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { createPki, type Pki } from '../tls/certs.js';

// docs/operations.md, Tracing: how spans are sent. Exports travel over our
// undici transport (src/tracing/otlp-http.ts) with what OpenTelemetry's
// exporters read from the standard variables — headers, compression, timeout,
// the CA and client certificate files — and their retry policy: 429, 502,
// 503, 504, a timeout and a failed connection are tried again within the
// export timeout; any other answer is final. The proxy runs as a child
// process, so the OTEL_* variables are its own environment's.

const LOST = 'idempotency_proxy_tracing_spans_lost_total';
const SPANS_PER_EXECUTION = 4; // server, claim, upstream, commit

describe('tracing: the OTLP/HTTP transport', () => {
  let db: TestDatabase;
  let upstream: TestUpstream;
  let pki: Pki;
  before(async () => {
    db = await createTestDatabase();
    upstream = await startUpstream(jsonResponder(201, 20));
    pki = createPki();
  });
  after(async () => {
    await upstream.close();
    await db.drop();
    pki.remove();
  });

  /**
   * A proxy exporting to `receiver`, one execution sent through it. Its four spans go as one export request: a
   * batch is sent when it holds four spans (a timer could split them across two requests and the counts below).
   */
  async function withExecution(receiverOptions: ReceiverOptions, env: NodeJS.ProcessEnv, check: (receiver: Receiver, proxy: SpawnedProxy) => Promise<void>): Promise<void> {
    const receiver = await startReceiver(receiverOptions);
    const proxy = await spawnProxy(['serve', '--upstream', upstream.url, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', '--database-url', db.url],
      { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_MAX_EXPORT_BATCH_SIZE: String(SPANS_PER_EXECUTION), OTEL_BSP_SCHEDULE_DELAY: '60000', ...env });
    try {
      const r = await send(`${proxy.url}/orders`, { headers: { 'idempotency-key': `otlp-http-${Date.now()}-${Math.random()}`, 'content-type': 'application/json' }, body: '{"amount":1}' });
      assert.equal(r.status, 201, 'the request never depends on the collector');
      await check(receiver, proxy);
    } finally {
      await proxy.stop();
      await receiver.close();
    }
  }

  const lost = async (proxy: SpawnedProxy, cause: string): Promise<number> => metric(await metricsText(proxy.adminUrl), LOST, { cause });

  test('OTEL_EXPORTER_OTLP_HEADERS and OTEL_EXPORTER_OTLP_COMPRESSION=gzip: every export carries the headers, gzip-compressed', async () => {
    await withExecution({}, { OTEL_EXPORTER_OTLP_HEADERS: 'x-collector-token=s3cret,x-team=payments', OTEL_EXPORTER_OTLP_COMPRESSION: 'gzip' }, async (receiver) => {
      await waitFor('the execution\'s spans at the collector', () => receiver.spans.length >= SPANS_PER_EXECUTION);
      const h = receiver.headers[0]!;
      assert.equal(h['content-encoding'], 'gzip');
      assert.equal(h['x-collector-token'], 's3cret');
      assert.equal(h['x-team'], 'payments');
      assert.equal(h['content-type'], 'application/x-protobuf');
      assert.match(String(h['user-agent']), /^idempotency-proxy\/\d+\.\d+\.\d+$/);
      const names = receiver.spans.map((s) => s.name).sort();
      assert.deepEqual(names.filter((n) => !n.startsWith('POST ')), ['claim', 'commit', 'upstream'], names.join(', '));
      assert.equal(names.filter((n) => n.startsWith('POST ')).length, 1, 'one server span, decoded from the gunzipped body');
      assert.equal(receiver.contentTypes[0], 'POST /v1/traces application/x-protobuf');
    });
  });

  test('credentials in the endpoint URL go as Basic authorization, as node:http would send them', async () => {
    const receiver = await startReceiver();
    const withUser = receiver.url.replace('http://', 'http://otel%40team:p%3Ass@');
    try {
      await withExecution({}, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${withUser}/v1/traces` }, async (other) => {
        await waitFor('the spans, at the endpoint with credentials', () => receiver.spans.length >= SPANS_PER_EXECUTION);
        assert.equal(receiver.headers[0]!['authorization'], `Basic ${Buffer.from('otel@team:p:ss').toString('base64')}`);
        assert.equal(other.headers.length, 0, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT wins over OTEL_EXPORTER_OTLP_ENDPOINT');
      });
    } finally {
      await receiver.close();
    }
  });

  test('a collector that answers 503 with Retry-After, then 429: tried again until it takes the spans, none lost', async () => {
    const answers = [{ status: 503, headers: { 'retry-after': '0' } }, { status: 429 }];
    await withExecution({ answers }, {}, async (receiver, proxy) => {
      // The second retry waits the policy's first backoff (1 s ± 20 %): no Retry-After on the 429.
      await waitFor('the spans, on the third attempt', () => receiver.spans.length >= SPANS_PER_EXECUTION, 8_000);
      assert.equal(receiver.headers.length, 3, 'three attempts: 503, 429, 200');
      assert.equal(receiver.spans.length, SPANS_PER_EXECUTION);
      assert.equal(await lost(proxy, 'export_failed'), 0);
    });
  });

  test('a collector that answers 400: not tried again, the spans counted as export_failed', async () => {
    await withExecution({ answers: [{ status: 400, body: 'bad request' }] }, {}, async (receiver, proxy) => {
      await waitFor('export_failed', async () => (await lost(proxy, 'export_failed')) === SPANS_PER_EXECUTION);
      await sleep(1_500); // past the first backoff: a retry would have arrived
      assert.equal(receiver.headers.length, 1, 'one attempt');
      assert.equal(receiver.spans.length, 0);
    });
  });

  test('a collector whose answer is larger than 4 MB: not read, the spans counted as export_failed', async () => {
    await withExecution({ answers: [{ status: 200, body: 'x'.repeat(5 * 1024 * 1024) }] }, {}, async (receiver, proxy) => {
      await waitFor('export_failed', async () => (await lost(proxy, 'export_failed')) === SPANS_PER_EXECUTION);
      assert.equal(receiver.headers.length, 1, 'one attempt');
    });
  });

  test('a collector that does not answer within OTEL_EXPORTER_OTLP_TIMEOUT: the export gives up at the timeout, export_failed', async () => {
    await withExecution({ delayMs: 5_000 }, { OTEL_EXPORTER_OTLP_TIMEOUT: '700' }, async (_receiver, proxy) => {
      const started = Date.now();
      await waitFor('export_failed', async () => (await lost(proxy, 'export_failed')) === SPANS_PER_EXECUTION, 4_000);
      assert.ok(Date.now() - started < 3_000, `given up within the timeout, not after the collector's 5 s: ${Date.now() - started} ms`);
    });
  });

  test('an export still waiting for its connection at the timeout ends there, retryable', async () => {
    // A collector that takes TCP connections and never answers the TLS handshake: the request never gets its
    // connection (undici's own connect timeout is 10 s).
    const held: net.Socket[] = [];
    const silent = net.createServer((socket) => held.push(socket));
    silent.listen(0, '127.0.0.1');
    await once(silent, 'listening');
    const transport = new UndiciOtlpTransport({
      url: `https://127.0.0.1:${(silent.address() as AddressInfo).port}/v1/traces`, headers: async () => ({ 'Content-Type': 'application/x-protobuf' }),
      compression: 'none', tls: {}, connections: 1, version: '0.0.0',
    });
    try {
      const started = Date.now();
      const result = await transport.send(new Uint8Array(0), 500);
      const took = Date.now() - started;
      assert.equal(result.status, 'retryable');
      assert.ok(took < 2_000, `ended at the export timeout, not at the connect timeout: ${took} ms`);
    } finally {
      transport.shutdown();
      for (const socket of held) socket.destroy();
      silent.close();
    }
  });

  test('https: the collector\'s CA from OTEL_EXPORTER_OTLP_CERTIFICATE, a client certificate from OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE/_KEY', async () => {
    const server = pki.issue('collector', '/CN=collector', { san: 'IP:127.0.0.1' });
    const client = pki.issue('proxy-client', '/CN=idempotency-proxy', { clientAuth: true });
    const tls = { key: readFileSync(server.key), cert: readFileSync(server.cert), ca: pki.ca, requestCert: true };
    // Without the CA the collector's certificate is not trusted: nothing sent, the spans counted as lost.
    await withExecution({ tls }, {}, async (receiver, proxy) => {
      await waitFor('export_failed', async () => (await lost(proxy, 'export_failed')) === SPANS_PER_EXECUTION, 5_000);
      assert.equal(receiver.spans.length, 0);
    });
    await withExecution({ tls }, {
      OTEL_EXPORTER_OTLP_CERTIFICATE: pki.caFile, OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE: client.cert, OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY: client.key,
    }, async (receiver, proxy) => {
      await waitFor('the spans over TLS', () => receiver.spans.length >= SPANS_PER_EXECUTION, 5_000);
      assert.equal(await lost(proxy, 'export_failed'), 0);
    });
  });

  test('a CA or client certificate file that cannot be read stops the start, the variable named', () => {
    const config = { enabled: true, endpoint: 'https://127.0.0.1:9', serviceName: 'otlp-http-test', sampleRatio: null, protocol: 'http/protobuf' } as TracingConfig;
    const hooks = { onLoss: () => {} };
    assert.throws(() => startTracing(config, hooks, { OTEL_EXPORTER_OTLP_CERTIFICATE: '/nonexistent/ca.pem' }),
      /OTEL_EXPORTER_OTLP_CERTIFICATE=\/nonexistent\/ca\.pem: cannot be read \(ENOENT\)/);
    assert.throws(() => startTracing(config, hooks, { OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY: '/nonexistent/key.pem', OTEL_EXPORTER_OTLP_CLIENT_KEY: pki.caFile }),
      /OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY=\/nonexistent\/key\.pem: cannot be read/);
    assert.throws(() => startTracing(config, hooks, { OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: pki.caFile }), /set both or neither/);
  });
});
