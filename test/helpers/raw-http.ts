import { createHash } from 'node:crypto';
import net from 'node:net';

// The raw HTTP/1.1 client of the tests: exact bytes on a fresh connection
// (bad header bytes, repeated lines, hop-by-hop headers, hostile framing,
// slow trickles) that no well-behaved client would send, and one parser for
// what comes back.

export interface RawReply {
  /** Every byte the server sent on the connection. */
  readonly raw: Buffer;
  /** Status of the first final response (interim 1xx answers skipped); null when none came. */
  readonly status: number | null;
  /** The first final response's header lines: lower-case names, repeated lines kept in order. */
  readonly headers: Array<[string, string]>;
  /** Its body, by its framing (Content-Length, chunked, or up to the close). */
  readonly body: Buffer;
  /** The first final response arrived whole. */
  readonly complete: boolean;
  /** The server closed the connection (rather than the test's timeout). */
  readonly closedByServer: boolean;
  /** The first line of a header, or undefined. */
  header(name: string): string | undefined;
  text(): string;
  json(): any;
}

const EMPTY = Buffer.alloc(0);

function frame(rest: Buffer, status: number, get: (n: string) => string | undefined, closed: boolean): { body: Buffer; complete: boolean } {
  if (status === 204 || status === 304) return { body: EMPTY, complete: true };
  const cl = get('content-length');
  if (cl !== undefined) return rest.length < Number(cl) ? { body: rest, complete: false } : { body: rest.subarray(0, Number(cl)), complete: true };
  if (get('transfer-encoding') === 'chunked') {
    const parts: Buffer[] = [];
    for (;;) {
      const nl = rest.indexOf('\r\n');
      if (nl === -1) return { body: Buffer.concat(parts), complete: false };
      const size = parseInt(rest.subarray(0, nl).toString(), 16);
      if (size === 0) return { body: Buffer.concat(parts), complete: true };
      if (rest.length < nl + 2 + size + 2) return { body: Buffer.concat(parts), complete: false };
      parts.push(rest.subarray(nl + 2, nl + 2 + size));
      rest = rest.subarray(nl + 2 + size + 2);
    }
  }
  return { body: rest, complete: closed }; // delimited by the close
}

/** Parses what a server sent on one connection. */
export function parseReply(raw: Buffer, closedByServer: boolean): RawReply {
  let buf = raw;
  // Interim answers (100 Continue) come before the final one: skip them.
  while (/^HTTP\/1\.[01] 1\d\d /.test(buf.toString('latin1', 0, 13))) {
    const e = buf.indexOf('\r\n\r\n');
    if (e === -1) break;
    buf = buf.subarray(e + 4);
  }
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(buf.toString('latin1', 0, 16));
  const end = buf.indexOf('\r\n\r\n');
  const headers: Array<[string, string]> = [];
  if (m !== null && end !== -1) {
    for (const l of buf.subarray(0, end).toString('latin1').split('\r\n').slice(1)) {
      const i = l.indexOf(':');
      if (i > 0) headers.push([l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim()]);
    }
  }
  const get = (n: string): string | undefined => headers.find(([k]) => k === n)?.[1];
  const status = m === null ? null : Number(m[1]);
  const { body, complete } = status === null || end === -1 ? { body: EMPTY, complete: false } : frame(buf.subarray(end + 4), status, get, closedByServer);
  return { raw, status, headers, body, complete, closedByServer, header: get, text: () => body.toString(), json: () => JSON.parse(body.toString()) };
}

/**
 * Sends bytes as one HTTP/1.1 exchange on a fresh connection and resolves
 * with the first complete response; rejects when none comes within
 * `timeoutMs` or the connection ends first. The request should say
 * `Connection: close` unless the server closes by itself.
 */
export function rawRequest(url: string, request: string | Buffer, opts: { timeoutMs?: number } = {}): Promise<RawReply> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(u.port), u.hostname);
    const chunks: Buffer[] = [];
    let done = false;
    let closed = false;
    const timer = setTimeout(() => finish(new Error('raw request timed out')), opts.timeoutMs ?? 10_000);
    const finish = (err: Error | null): void => {
      if (done) return;
      const parsed = parseReply(Buffer.concat(chunks), closed);
      if (err === null && !parsed.complete) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      if (!parsed.complete) reject(err ?? new Error('incomplete response'));
      else resolve(parsed);
    };
    socket.on('data', (d: Buffer) => {
      chunks.push(d);
      finish(null);
    });
    // A server that closed after answering may reset our unsent body: an answer that arrived still counts.
    socket.on('error', (e) => finish(e));
    const ended = (): void => {
      closed = true;
      finish(new Error('connection closed before a complete response'));
    };
    socket.on('end', ended);
    socket.on('close', ended);
    socket.write(request);
  });
}

/** A raw POST (or `method`): header lines given verbatim (Buffers for raw bytes), Content-Length added. */
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

/**
 * Sends bytes and collects everything the server sends until it closes, or —
 * once a complete response is in — for `graceMs` more (so a second response
 * smuggled behind the first is still seen), or until `timeoutMs`. Never
 * rejects: what came, if anything, is in the reply.
 */
export function rawCollect(url: string, bytes: string | Buffer, timeoutMs = 2000, graceMs = 150): Promise<RawReply> {
  return new Promise((resolve) => {
    const sock = net.connect(Number(new URL(url).port), '127.0.0.1', () => sock.write(bytes));
    const chunks: Buffer[] = [];
    let byServer = false;
    let grace: NodeJS.Timeout | undefined;
    const t = setTimeout(() => sock.destroy(), timeoutMs);
    sock.on('data', (d: Buffer) => {
      chunks.push(d);
      if (grace === undefined && parseReply(Buffer.concat(chunks), false).complete) grace = setTimeout(() => sock.destroy(), graceMs);
    });
    sock.on('end', () => { byServer = true; });
    sock.on('error', () => { byServer = true; });
    sock.on('close', () => {
      clearTimeout(t);
      clearTimeout(grace);
      resolve(parseReply(Buffer.concat(chunks), byServer));
    });
  });
}

export interface OpenSocket {
  readonly socket: net.Socket;
  write(bytes: string | Buffer): Promise<void>;
  /** Resolves with what the server sent once the connection closed. */
  readonly done: Promise<RawReply>;
  /** Bytes received so far. */
  received(): Buffer;
}

/** A connection the test writes to piece by piece. */
export async function openSocket(url: string): Promise<OpenSocket> {
  const sock = net.connect(Number(new URL(url).port), '127.0.0.1');
  await new Promise<void>((resolve, reject) => {
    sock.once('connect', resolve);
    sock.once('error', reject);
  });
  const chunks: Buffer[] = [];
  let byServer = false;
  sock.on('data', (d: Buffer) => chunks.push(d));
  sock.on('end', () => { byServer = true; });
  sock.on('error', () => { byServer = true; });
  const done = new Promise<RawReply>((resolve) => sock.on('close', () => resolve(parseReply(Buffer.concat(chunks), byServer))));
  return {
    socket: sock,
    write: (bytes) => new Promise<void>((resolve) => {
      if (sock.destroyed) return resolve();
      sock.write(bytes, () => resolve());
    }),
    done,
    received: () => Buffer.concat(chunks),
  };
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
