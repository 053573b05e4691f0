import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { BatchedStdout, createLogger, keyHash } from '../../src/log/logger.js';
import { createRequestLog, ms3 } from '../../src/log/request-log.js';
import { sleep } from '../helpers/wait.js';

// The log destination (src/log/logger.ts): lines are encoded into one buffer
// and written in batches. Every line must arrive whole and in order, whatever
// its size or characters; a full pipe is waited out; a broken one does not
// take the proxy down.

const LOGGER = fileURLToPath(new URL('../../src/log/logger.js', import.meta.url));

function tempFile(): { file: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'idem-log-'));
  return { file: join(dir, 'out.log'), remove: () => rmSync(dir, { recursive: true, force: true }) };
}

test('lines arrive whole and in order: multi-byte text, batch boundaries, a line larger than the buffer', () => {
  const t = tempFile();
  const fd = openSync(t.file, 'w');
  try {
    const out = new BatchedStdout(fd, 1024, 10_000);
    const lines: string[] = [];
    for (let i = 0; i < 500; i++) lines.push(`{"n":${i},"text":"${'é€😀'.repeat(i % 7)}${'x'.repeat(i % 50)}"}\n`);
    lines.splice(250, 0, `{"big":"${'y'.repeat(300_000)}"}\n`);
    for (const l of lines) out.write(l);
    out.flushSync();
    assert.equal(readFileSync(t.file, 'utf8'), lines.join(''));
  } finally {
    closeSync(fd);
    t.remove();
  }
});

test('a pending line is written within the interval without any further line', async () => {
  const t = tempFile();
  const fd = openSync(t.file, 'w');
  try {
    const out = new BatchedStdout(fd, 16 * 1024, 50);
    out.write('{"msg":"alone"}\n');
    assert.equal(readFileSync(t.file, 'utf8'), '', 'batched, not written at once');
    await sleep(200);
    assert.equal(readFileSync(t.file, 'utf8'), '{"msg":"alone"}\n');
    out.flushSync();
  } finally {
    closeSync(fd);
    t.remove();
  }
});

function runChild(script: string, onStdout: (child: ReturnType<typeof spawn>) => void): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  onStdout(child);
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stderr })));
}

test('a reader slower than the writer (a full non-blocking pipe) loses nothing', async () => {
  const n = 20_000;
  const script = `
    import { BatchedStdout } from ${JSON.stringify(LOGGER)};
    process.stdout; // Node turns a piped stdout non-blocking: writes meet EAGAIN when the pipe is full
    const out = new BatchedStdout(1);
    for (let i = 0; i < ${n}; i++) out.write('{"n":' + i + ',"pad":"' + 'p'.repeat(100) + '"}\\n');
    out.flushSync();
    process.stderr.write('done\\n');
  `;
  let text = '';
  const r = await runChild(script, (child) => {
    child.stdout!.pause();
    setTimeout(() => {
      child.stdout!.on('data', (c: Buffer) => (text += c.toString()));
      child.stdout!.resume();
    }, 500);
  });
  assert.equal(r.code, 0, r.stderr);
  const lines = text.trimEnd().split('\n');
  assert.equal(lines.length, n);
  lines.forEach((l, i) => assert.equal((JSON.parse(l) as { n: number }).n, i));
});

test('a closed stdout (EPIPE) loses the lines, says so once on stderr, and the process goes on', async () => {
  const script = `
    import { BatchedStdout } from ${JSON.stringify(LOGGER)};
    const out = new BatchedStdout(1, 256);
    await new Promise((r) => setTimeout(r, 300)); // the reader is gone by now
    for (let i = 0; i < 1000; i++) out.write('{"n":' + i + '}\\n');
    out.flushSync();
    process.stderr.write('still serving\\n');
  `;
  const r = await runChild(script, (child) => child.stdout!.destroy());
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stderr, /still serving/);
  const reports = r.stderr.match(/log lines are being lost/g) ?? [];
  assert.equal(reports.length, 1, r.stderr);
  assert.match(r.stderr, /EPIPE/);
});

test('the request line\'s milliseconds read as the number rounded to three decimals, written the shortest way', () => {
  const round3 = (ms: number): number => Math.round(ms * 1000) / 1000;
  const fixed = [0, 0.0004, 0.0005, 0.001, 0.01, 0.1, 0.5, 1, 1.1, 1.01, 1.001, 1.2345, 9.999, 9.9995, 18.3, 18.337, 100, 1234.5678, 2147483.647, 2147483.6475, 1e7, -1, Number.NaN];
  for (const v of fixed) assert.equal(ms3(v), String(round3(v)), `ms3(${v})`);
  fc.assert(fc.property(fc.double({ min: 0, max: 3e6, noNaN: true }), (v) => ms3(v) === String(round3(v))), { numRuns: 20_000 });
  fc.assert(fc.property(fc.integer({ min: 0, max: 2 ** 31 + 10 }), (us) => ms3(us / 1000) === String(round3(us / 1000))), { numRuns: 20_000 });
});

test('the request line is what pino writes for the same fields', () => {
  const lines: string[] = [];
  const logger = createLogger('info', { write: (l: string) => void lines.push(l) });
  const child = logger.child({ instance: 'a' });
  const log = createRequestLog(child);
  log({
    requestId: 'r-1"x', method: 'POST', path: '/v1/pay\u00e9', outcome: 'executed', phase: 'commit', source: 'store', status: 201, tenantId: 't', key: 'k',
    attempt: 2, released: false, shadow: null, probe: 'found', cache: 'miss', detail: 'a "quoted"\nline', upstreamMs: 12.3456, storeMs: 0.5,
  }, 'payments', 20.1);
  child.info({ requestId: 'r-1"x', route: 'payments', method: 'POST', path: '/v1/pay\u00e9', outcome: 'executed', phase: 'commit', status: 201, source: 'store', key: keyHash('t', 'k'),
    attempt: 2, probe: 'found', cache: 'miss', detail: 'a "quoted"\nline', ms: 20.1, upstreamMs: 12.346, storeMs: 0.5 }, 'request');
  assert.equal(lines.length, 2);
  const [ours, pinos] = lines.map((l) => l.replace(/"time":\d+/, '"time":0'));
  assert.equal(ours, pinos);
});
