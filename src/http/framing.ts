import type { IncomingMessage } from 'node:http';
import { Problems, type ProblemDef } from './problems.js';

// What Node's HTTP parser lets through but a reverse proxy must not forward
// (RFC 9112): requests whose framing or target the upstream could read
// differently from the proxy. Checked before routing, so such a request is
// never routed, claimed or forwarded; the connection is closed after the
// error.

export interface FramingProblem {
  readonly problem: ProblemDef;
  readonly status: number;
  readonly detail: string;
}

const DOT_SEGMENT = /(^|\/)\.\.?(\/|$)/;

/**
 * The request headers the proxy accepts, in bytes: HTTP/1.1's header section
 * (Node's parser answers 431 beyond it, src/http/server.ts) and an HTTP/2
 * header list as RFC 9113 §6.5.2 counts it (each field's name and value plus
 * 32), answered 431 here. HTTP/2 sessions advertise twice as much
 * (src/http/h2.ts), so a client that heeds SETTINGS_MAX_HEADER_LIST_SIZE
 * sends what is between the two and gets the problem, not a reset stream.
 */
export const MAX_HEADER_BYTES = 32 * 1024;

function bad(detail: string): FramingProblem {
  return { problem: Problems.badRequest, status: 400, detail };
}

export function checkFraming(req: IncomingMessage): FramingProblem | null {
  const raw = req.rawHeaders;
  const h2 = req.httpVersionMajor === 2;
  let hosts = 0;
  let listBytes = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i]!;
    if (n.length === 4 && n.toLowerCase() === 'host') hosts++;
    // Field names and values are latin1 strings here: one character, one octet.
    if (h2) listBytes += n.length + raw[i + 1]!.length + 32;
  }
  if (listBytes > MAX_HEADER_BYTES) {
    return { problem: Problems.headersTooLarge, status: 431, detail: `the request header list (${listBytes} bytes as HTTP/2 counts it) is larger than the proxy accepts (${MAX_HEADER_BYTES})` };
  }
  // RFC 9112 §3.2: exactly one Host line (HTTP/1.0 may leave it out).
  if (hosts > 1) return bad('the request has more than one Host header line');
  if (hosts === 0 && req.httpVersion !== '1.0') return bad('an HTTP/1.1 request needs a Host header');
  // HTTP/2 (src/http/h2.ts made :authority the Host line if there was none): both must agree (RFC 9113 §8.3.1).
  if (req.httpVersionMajor === 2 && req.headers[':authority'] !== undefined && req.headers[':authority'] !== req.headers.host) {
    return bad('the :authority and Host of the HTTP/2 request differ');
  }

  const te = req.headers['transfer-encoding'];
  if (te !== undefined) {
    // RFC 9112 §6.1: Transfer-Encoding in HTTP/1.0 means faulty framing.
    if (req.httpVersion === '1.0') return bad('an HTTP/1.0 request must not carry Transfer-Encoding');
    // Node decodes only chunked; forwarding any other coding would hand the
    // upstream bytes it cannot interpret (and fingerprint the wrong body).
    if (te.trim().toLowerCase() !== 'chunked') {
      return { problem: Problems.transferCodingUnsupported, status: 501, detail: `the transfer coding "${te}" is not supported; send the body with Content-Length or Transfer-Encoding: chunked` };
    }
  }

  // Routes match the path as sent: only origin-form targets without dot
  // segments, so the upstream cannot resolve a path the routes never saw.
  const url = req.url ?? '';
  // OPTIONS * asks about the server as a whole (RFC 9110 §9.3.7), which is the proxy's upstream, and undici sends
  // no target but a path: refused here rather than answered 502 "upstream unreachable", which it is not.
  if (url === '*') {
    return bad(req.method === 'OPTIONS'
      ? 'the asterisk request target (OPTIONS *) is not forwarded: ask about one path instead (OPTIONS /v1/payments)'
      : 'the asterisk request target is only allowed with OPTIONS, and is not forwarded');
  }
  if (url.charCodeAt(0) !== 0x2f /* / */) return bad('the request target must be a path (origin-form, e.g. /v1/payments), not an absolute URL or an authority');
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  if (path.includes('/.') && DOT_SEGMENT.test(path)) return bad('the request path contains "." or ".." segments; send the normalized path');
  return null;
}
