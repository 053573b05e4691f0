import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { Pool, request } from 'undici';
import type { Rng } from './rng.js';

// The fuzzer's clients: each duplicate of a key goes out one of these ways,
// over HTTP/1.1 or h2c, whole or broken off. A mode that breaks off reads
// no answer (`gone`); the others return what came back, or the error.

export const MODES = [
  'undici', 'undici', 'h2', 'h2', 'pipelined', 'expect-continue', 'http1.0', 'other-payload',
  'leave-mid-body', 'leave-after-body', 'leave-mid-response', 'stall-mid-body', 'h2-cancel-mid-body', 'h2-cancel-after-body',
  'slow-reader', 'h2-slow-reader',
] as const;

/** How long a slow reader reads nothing of its answer: past upstream.timeout (upstream.ts), within the send timeout. */
const READS_NOTHING_MS = 2600;
export type Mode = typeof MODES[number] | 'final';

export interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Buffer;
}

export type Outcome = { answer: Answer } | { gone: true } | { error: Error & { code?: string } };

/** A POST's bytes as a raw socket sends them. */
function rawRequest(version: '1.0' | '1.1', path: string, headers: Record<string, string>, body: Buffer): Buffer {
  let head = `POST ${path} HTTP/${version}\r\nhost: fuzz\r\ncontent-length: ${body.length}\r\n`;
  for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
  return Buffer.concat([Buffer.from(`${head}\r\n`), body]);
}

/** One proxy instance as the clients reach it. */
export class Target {
  readonly session: http2.ClientHttp2Session;
  private readonly pools: Pool[] = [];

  constructor(readonly url: string) {
    // Node's HTTP/2 client keeps counting the body bytes it could not send on a stream the server answered early
    // and closed; past its maxSessionMemory (10 MB by default) it refuses its own new streams with
    // ENHANCE_YOUR_CALM. That is the client's limit, not the proxy's: room for a whole run.
    this.session = http2.connect(url, { maxSessionMemory: 1024 });
    this.session.on('error', () => {});
  }

  async close(): Promise<void> {
    this.session.close();
    await Promise.all(this.pools.map((p) => p.close()));
  }

  /** Sends one request the way `mode` says. */
  async send(mode: Mode, rng: Rng, path: string, headers: Record<string, string>, body: Buffer): Promise<Outcome | Outcome[]> {
    try {
      switch (mode) {
        case 'undici':
        case 'other-payload':
        case 'final':
          return { answer: await this.undici(path, headers, body) };
        case 'h2':
          return { answer: await this.h2(path, headers, body) };
        case 'pipelined': {
          // Two duplicates pipelined on one HTTP/1.1 connection.
          const pool = new Pool(this.url, { connections: 1, pipelining: 4 });
          this.pools.push(pool);
          return await Promise.all([this.undici(path, headers, body, pool), this.undici(path, headers, body, pool)].map((p) => p.then(
            (answer): Outcome => ({ answer }), (error: Error): Outcome => ({ error }))));
        }
        case 'expect-continue':
          return { answer: await this.expectContinue(path, headers, body) };
        case 'http1.0':
          return { answer: await this.http10(path, headers, body) };
        case 'leave-mid-body':
        case 'leave-after-body':
        case 'leave-mid-response':
        case 'stall-mid-body':
          return await this.raw(mode, rng, path, headers, body);
        case 'h2-cancel-mid-body':
        case 'h2-cancel-after-body':
          return await this.h2Cancel(mode, rng, path, headers, body);
        case 'slow-reader':
          return { answer: await this.slowReader(path, headers, body) };
        case 'h2-slow-reader':
          return { answer: await this.h2(path, headers, body, READS_NOTHING_MS) };
      }
    } catch (err) {
      return { error: err as Error };
    }
  }

  private async undici(path: string, headers: Record<string, string>, body: Buffer, dispatcher?: Pool): Promise<Answer> {
    const r = await request(`${this.url}${path}`, { method: 'POST', headers, body, headersTimeout: 30_000, bodyTimeout: 30_000, ...(dispatcher ? { dispatcher } : {}) });
    return { status: r.statusCode, headers: r.headers, body: Buffer.from(await r.body.arrayBuffer()) };
  }

  /** Over h2c; with `pauseMs`, the answer's body is not read until that long after its headers. */
  private h2(path: string, headers: Record<string, string>, body: Buffer, pauseMs = 0): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const st = this.session.request({ ':method': 'POST', ':path': path, 'content-length': String(body.length), ...headers });
      const chunks: Buffer[] = [];
      let head: http2.IncomingHttpHeaders = {};
      st.on('response', (h) => {
        head = h;
        if (pauseMs > 0) {
          st.pause();
          setTimeout(() => st.resume(), pauseMs);
        }
      });
      st.on('data', (c: Buffer) => chunks.push(c));
      st.on('end', () => resolve({ status: Number(head[':status']), headers: head, body: Buffer.concat(chunks) }));
      st.on('error', reject);
      st.end(body);
    });
  }

  private expectContinue(path: string, headers: Record<string, string>, body: Buffer): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const req = http.request(`${this.url}${path}`, {
        method: 'POST', agent: false, headers: { ...headers, expect: '100-continue', 'content-length': body.length },
      });
      req.on('continue', () => req.end(body));
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.flushHeaders();
    });
  }

  /** HTTP/1.1 that reads nothing of the answer for a while after its headers, then all of it. */
  private slowReader(path: string, headers: Record<string, string>, body: Buffer): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const req = http.request(`${this.url}${path}`, { method: 'POST', agent: false, headers: { ...headers, 'content-length': body.length } });
      req.on('response', (res) => {
        res.pause();
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
        setTimeout(() => res.resume(), READS_NOTHING_MS);
      });
      req.on('error', reject);
      req.end(body);
    });
  }

  /** HTTP/1.0 on a raw socket: a body without Content-Length ends where the connection closes. */
  private http10(path: string, headers: Record<string, string>, body: Buffer): Promise<Answer> {
    const { hostname, port } = new URL(this.url);
    return new Promise((resolve, reject) => {
      const s = net.connect(Number(port), hostname);
      const chunks: Buffer[] = [];
      s.on('data', (c: Buffer) => chunks.push(c));
      s.on('error', reject);
      s.on('end', () => {
        s.destroy();
        const raw = Buffer.concat(chunks);
        const split = raw.indexOf('\r\n\r\n');
        if (split < 0) return reject(Object.assign(new Error('closed before a whole head'), { code: 'HEAD_INCOMPLETE' }));
        const [statusLine, ...lines] = raw.subarray(0, split).toString('latin1').split('\r\n');
        const answerHeaders: Record<string, string> = {};
        for (const line of lines) {
          const colon = line.indexOf(':');
          answerHeaders[line.slice(0, colon).trim().toLowerCase()] ??= line.slice(colon + 1).trim();
        }
        let answerBody = raw.subarray(split + 4);
        const length = answerHeaders['content-length'];
        if (length !== undefined) {
          if (answerBody.length < Number(length)) return reject(Object.assign(new Error('body shorter than Content-Length'), { code: 'SHORT_BODY' }));
          answerBody = answerBody.subarray(0, Number(length));
        }
        resolve({ status: Number(statusLine!.split(' ')[1]), headers: answerHeaders, body: answerBody });
      });
      s.write(rawRequest('1.0', path, headers, body));
    });
  }

  /** HTTP/1.1 on a raw socket, left at some point. */
  private raw(mode: Mode, rng: Rng, path: string, headers: Record<string, string>, body: Buffer): Promise<Outcome> {
    const { hostname, port } = new URL(this.url);
    const bytes = rawRequest('1.1', path, headers, body);
    // stall-mid-body: the body stops one byte short, and the client leaves only after a while.
    const wait = mode === 'leave-mid-body' ? 50 + rng() * 100 : mode === 'stall-mid-body' ? 500 + rng() * 2500 : rng() * 400;
    const short = mode === 'leave-mid-body' ? 5 : mode === 'stall-mid-body' ? 1 : 0;
    return new Promise((resolve) => {
      const s = net.connect(Number(port), hostname);
      const gone = (): void => { s.destroy(); resolve({ gone: true }); };
      s.on('error', () => {});
      s.on('close', gone);
      s.on('connect', () => {
        s.write(bytes.subarray(0, bytes.length - short));
        if (mode !== 'leave-mid-response') setTimeout(gone, wait);
      });
      if (mode === 'leave-mid-response') s.once('data', gone);
    });
  }

  /** An h2c stream cancelled (RST_STREAM CANCEL) at some point. */
  private h2Cancel(mode: Mode, rng: Rng, path: string, headers: Record<string, string>, body: Buffer): Promise<Outcome> {
    return new Promise((resolve) => {
      const st = this.session.request({ ':method': 'POST', ':path': path, 'content-length': String(body.length), ...headers });
      st.on('error', () => {});
      st.resume();
      st.on('close', () => resolve({ gone: true }));
      if (mode === 'h2-cancel-mid-body') {
        st.write(body.subarray(0, body.length - 3));
        setTimeout(() => st.close(http2.constants.NGHTTP2_CANCEL), 30 + rng() * 100);
      } else {
        st.end(body);
        setTimeout(() => st.close(http2.constants.NGHTTP2_CANCEL), rng() * 400);
      }
    });
  }
}
