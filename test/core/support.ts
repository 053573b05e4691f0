import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/log/logger.js';
import { PROBLEM_BASE } from '../../src/http/problems.js';
import type { Reply } from '../helpers/http.js';

// Small tools shared by the core tests: a raw HTTP/1.1 client for requests
// undici refuses to send (bad header bytes, repeated lines, hop-by-hop
// headers), problem+json assertions, temp dirs, a log capture, polling.

export interface RawReply {
  readonly status: number;
  /** Lower-case names; repeated lines kept in order. */
  readonly headers: Array<[string, string]>;
  readonly body: Buffer;
  header(name: string): string | undefined;
  json(): any;
}

/**
 * Sends bytes as one HTTP/1.1 exchange on a fresh connection and parses the
 * answer (Content-Length, chunked, or until close). The request should say
 * `Connection: close` unless the server closes by itself.
 */
export function rawRequest(url: string, request: string | Buffer, opts: { timeoutMs?: number } = {}): Promise<RawReply> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(u.port), u.hostname);
    const chunks: Buffer[] = [];
    let done = false;
    const timer = setTimeout(() => finish(new Error('raw request timed out')), opts.timeoutMs ?? 10_000);
    const finish = (err: Error | null): void => {
      if (done) return;
      const parsed = parse(Buffer.concat(chunks));
      if (err === null && parsed === 'incomplete') return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      if (parsed === 'incomplete') reject(err ?? new Error('incomplete response'));
      else resolve(parsed);
    };
    socket.on('data', (d: Buffer) => {
      chunks.push(d);
      finish(null);
    });
    // A server that closed after answering may reset our unsent body: an answer that arrived still counts.
    socket.on('error', (e) => finish(e));
    socket.on('end', () => finish(new Error('connection closed before a complete response')));
    socket.on('close', () => finish(new Error('connection closed before a complete response')));
    socket.write(request);
  });
}

function parse(buf: Buffer): RawReply | 'incomplete' {
  // Interim answers (100 Continue) come before the final one: skip them.
  while (/^HTTP\/1\.1 1\d\d /.test(buf.subarray(0, 13).toString('latin1'))) {
    const e = buf.indexOf('\r\n\r\n');
    if (e === -1) return 'incomplete';
    buf = buf.subarray(e + 4);
  }
  const end = buf.indexOf('\r\n\r\n');
  if (end === -1) return 'incomplete';
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(lines[0]!.split(' ')[1]);
  const headers: Array<[string, string]> = [];
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    headers.push([l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim()]);
  }
  const get = (n: string): string | undefined => headers.find(([k]) => k === n)?.[1];
  let rest = buf.subarray(end + 4);
  let body: Buffer;
  const cl = get('content-length');
  if (cl !== undefined) {
    if (rest.length < Number(cl)) return 'incomplete';
    body = rest.subarray(0, Number(cl));
  } else if (get('transfer-encoding') === 'chunked') {
    const parts: Buffer[] = [];
    for (;;) {
      const nl = rest.indexOf('\r\n');
      if (nl === -1) return 'incomplete';
      const size = parseInt(rest.subarray(0, nl).toString(), 16);
      if (size === 0) break;
      if (rest.length < nl + 2 + size + 2) return 'incomplete';
      parts.push(rest.subarray(nl + 2, nl + 2 + size));
      rest = rest.subarray(nl + 2 + size + 2);
    }
    body = Buffer.concat(parts);
  } else {
    body = rest; // until close: the caller only sees it on 'end'
    if (status !== 204 && status !== 304) return 'incomplete';
  }
  return { status, headers, body, header: get, json: () => JSON.parse(body.toString()) };
}

/** Builds a raw request: header lines are given verbatim (Buffers for raw bytes). */
export function rawPost(
  url: string,
  pathAndQuery: string,
  headerLines: ReadonlyArray<string | Buffer>,
  body: string | Buffer = '',
  method = 'POST',
): Promise<RawReply> {
  const u = new URL(url);
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body);
  const head: Buffer[] = [Buffer.from(`${method} ${pathAndQuery} HTTP/1.1\r\nHost: ${u.host}\r\nConnection: close\r\n`)];
  for (const l of headerLines) head.push(Buffer.isBuffer(l) ? l : Buffer.from(l, 'latin1'), Buffer.from('\r\n'));
  head.push(Buffer.from(`Content-Length: ${b.length}\r\n\r\n`), b);
  return rawRequest(url, Buffer.concat(head));
}

/** Asserts an RFC 9457 problem answer with the given slug and status. */
export function assertProblem(r: Reply | RawReply, slug: string, status: number): any {
  assert.equal(r.status, status, `status of ${r.body.toString()}`);
  const ct = 'header' in r ? r.header('content-type') : r.headers['content-type'];
  assert.equal(ct, 'application/problem+json');
  const p = JSON.parse(r.body.toString());
  assert.equal(p.type, PROBLEM_BASE + slug);
  assert.equal(p.status, status);
  assert.equal(typeof p.title, 'string');
  assert.ok(p.title.length > 0);
  assert.equal(typeof p.detail, 'string');
  assert.ok(p.detail.length > 0);
  assert.equal(typeof p.requestId, 'string');
  assert.ok(p.requestId.length > 0);
  return p;
}

export function header(r: Reply, name: string): string | undefined {
  const v = r.headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

/** A temporary directory removed by the returned function. */
export function tempDir(prefix = 'idem-core-'): { dir: string; remove(): void } {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export function writeFile(dir: string, name: string, text: string): string {
  const p = path.join(dir, name);
  writeFileSync(p, text);
  return p;
}

/** A pino logger whose lines the test can read. */
export function captureLogger(level = 'info'): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  let buf = '';
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      buf += chunk.toString();
      let i;
      while ((i = buf.indexOf('\n')) !== -1) {
        lines.push(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
      cb();
    },
  });
  return { logger: createLogger(level, sink), lines };
}

/** Polls fn until it returns a value other than undefined, or fails after ms. */
export async function waitFor<T>(what: string, fn: () => T | undefined | Promise<T | undefined>, ms = 5000, every = 25): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(every);
  }
}

/** Waits for the request line (`"msg":"request"`) of `path` among captured log lines. */
export function requestLine(lines: readonly string[], path: string): Promise<Record<string, unknown>> {
  return waitFor(`the request line of ${path}`, () => {
    for (const l of lines) {
      const j = JSON.parse(l) as Record<string, unknown>;
      if (j.msg === 'request' && j.path === path) return j;
    }
    return undefined;
  });
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A unique key per test run. */
export function uniqueKey(label: string): string {
  return `${label}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

/**
 * Reads a raw HTTP/1.1 response from a socket (paused or not) until the
 * server closes it: the head as text, and the body's length and sha256.
 */
export async function readRawResponse(socket: net.Socket): Promise<{ head: string; bytes: number; sha256: string }> {
  const hash = createHash('sha256');
  let bytes = 0;
  let head = '';
  let inBody = false;
  socket.on('data', (c: Buffer) => {
    if (!inBody) {
      head += c.toString('latin1');
      const at = head.indexOf('\r\n\r\n');
      if (at === -1) return;
      inBody = true;
      const rest = Buffer.from(head.slice(at + 4), 'latin1');
      head = head.slice(0, at + 4);
      bytes += rest.length;
      hash.update(rest);
      return;
    }
    bytes += c.length;
    hash.update(c);
  });
  socket.resume();
  await new Promise<void>((r) => socket.once('close', () => r()));
  return { head, bytes, sha256: hash.digest('hex') };
}

/** The sha256 of `chunk` repeated `times` times. */
export function repeatedSha256(chunk: Buffer, times: number): string {
  const h = createHash('sha256');
  for (let i = 0; i < times; i++) h.update(chunk);
  return h.digest('hex');
}
