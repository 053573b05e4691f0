import net from 'node:net';

// A raw TCP client: sends exact bytes (hostile framing, control characters,
// slow-loris trickles) that no well-behaved HTTP client would produce.

export interface RawReply {
  /** Everything the server sent before closing (or before the timeout). */
  readonly raw: Buffer;
  /** Status code of the first response, or null when none came. */
  readonly status: number | null;
  readonly headers: Record<string, string>;
  readonly body: string;
  /** The server closed the connection (rather than our timeout firing). */
  readonly closedByServer: boolean;
}

export function parseReply(raw: Buffer, closedByServer: boolean): RawReply {
  const text = raw.toString('latin1');
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
  const headers: Record<string, string> = {};
  const end = text.indexOf('\r\n\r\n');
  if (m !== null && end !== -1) {
    for (const line of text.slice(0, end).split('\r\n').slice(1)) {
      const i = line.indexOf(':');
      if (i > 0) headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
    }
  }
  return { raw, status: m === null ? null : Number(m[1]), headers, body: end === -1 ? '' : text.slice(end + 4), closedByServer };
}

function urlPort(url: string): number {
  return Number(new URL(url).port);
}

/** True once the first response (head and Content-Length body) is in. */
function firstResponseComplete(raw: Buffer): boolean {
  const end = raw.indexOf('\r\n\r\n');
  if (end === -1) return false;
  const m = /\r\ncontent-length: *(\d+)/i.exec(raw.subarray(0, end).toString('latin1'));
  if (/^HTTP\/1\.[01] 1\d\d /.test(raw.toString('latin1', 0, 16))) return false; // interim (100 Continue)
  return m !== null && raw.length >= end + 4 + Number(m[1]);
}

/**
 * Sends bytes and collects the answer until the server closes, or — once a
 * complete response is in — for graceMs more (so a second response smuggled
 * behind the first would still be seen), or until timeoutMs.
 */
export function rawRequest(url: string, bytes: string | Buffer, timeoutMs = 2000, graceMs = 150): Promise<RawReply> {
  return new Promise((resolve) => {
    const sock = net.connect(urlPort(url), '127.0.0.1', () => sock.write(bytes));
    const chunks: Buffer[] = [];
    let byServer = false;
    let grace: NodeJS.Timeout | undefined;
    const t = setTimeout(() => sock.destroy(), timeoutMs);
    sock.on('data', (d: Buffer) => {
      chunks.push(d);
      if (grace === undefined && firstResponseComplete(Buffer.concat(chunks))) grace = setTimeout(() => sock.destroy(), graceMs);
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
  const sock = net.connect(urlPort(url), '127.0.0.1');
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
