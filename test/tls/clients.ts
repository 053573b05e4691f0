import http2 from 'node:http2';
import https from 'node:https';
import { spawn } from 'node:child_process';
import type { PeerCertificate } from 'node:tls';

// Real clients against the TLS / HTTP/2 listener: Node's https and http2
// modules, and curl.

export interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Buffer;
  readonly httpVersion: string;
  readonly peer?: PeerCertificate;
}

export interface TlsClientOptions {
  readonly ca?: Buffer;
  readonly cert?: Buffer;
  readonly key?: Buffer;
  readonly servername?: string;
  readonly agent?: https.Agent | false;
}

/** One HTTPS/1.1 request (a new connection unless `agent` keeps one). */
export function httpsRequest(url: string, opts: TlsClientOptions & { method?: string; headers?: Record<string, string>; body?: string }): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = https.request(url, {
      method: opts.method ?? 'POST',
      headers: opts.headers ?? {},
      ...(opts.ca ? { ca: opts.ca } : {}),
      ...(opts.cert ? { cert: opts.cert, key: opts.key } : {}),
      ...(opts.servername ? { servername: opts.servername } : {}),
      agent: opts.agent ?? false,
    }, (res) => {
      const chunks: Buffer[] = [];
      const peer = (res.socket as import('node:tls').TLSSocket).getPeerCertificate();
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks), httpVersion: res.httpVersion, peer }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** Sends one request as a stream on `session`. */
export function h2Request(session: http2.ClientHttp2Session, path: string, headers: Record<string, string>, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': 'POST', ':path': path, ...headers });
    let head: http2.IncomingHttpHeaders & http2.IncomingHttpStatusHeader = {};
    const chunks: Buffer[] = [];
    stream.on('response', (h) => { head = h; });
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      const { ':status': status, ...rest } = head;
      resolve({ status: Number(status), headers: rest as Answer['headers'], body: Buffer.concat(chunks), httpVersion: '2.0' });
    });
    stream.on('error', reject);
    stream.end(body);
  });
}

export async function h2Connect(url: string, opts: TlsClientOptions = {}): Promise<http2.ClientHttp2Session> {
  const session = http2.connect(url, { ...(opts.ca ? { ca: opts.ca } : {}), ...(opts.cert ? { cert: opts.cert, key: opts.key } : {}) });
  await new Promise<void>((resolve, reject) => {
    session.once('connect', () => resolve());
    session.once('error', reject);
  });
  return session;
}

export interface CurlResult {
  readonly code: number | null;
  readonly status: number;
  readonly httpVersion: string;
  readonly headers: string;
  readonly body: string;
  readonly stderr: string;
}

/** curl with `args`; -i so the status line tells the protocol version. */
export function curl(args: readonly string[]): Promise<CurlResult> {
  return new Promise((resolve, reject) => {
    const proc = spawn('curl', ['-sS', '-i', '--max-time', '20', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    proc.stdout.on('data', (d: Buffer) => { out += d.toString('latin1'); });
    proc.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    proc.on('error', (e) => reject(new Error(`curl could not be started (${e.message}): apt-get install curl`)));
    proc.on('close', (code) => {
      const split = out.indexOf('\r\n\r\n');
      const headers = split === -1 ? out : out.slice(0, split);
      const m = /^HTTP\/([\d.]+) (\d{3})/.exec(headers);
      resolve({ code, status: m ? Number(m[2]) : 0, httpVersion: m ? m[1]! : '', headers, body: split === -1 ? '' : out.slice(split + 4), stderr: err });
    });
  });
}
