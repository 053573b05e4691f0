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

function bad(detail: string): FramingProblem {
  return { problem: Problems.badRequest, status: 400, detail };
}

export function checkFraming(req: IncomingMessage): FramingProblem | null {
  const raw = req.rawHeaders;
  let hosts = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i]!;
    if (n.length === 4 && n.toLowerCase() === 'host') hosts++;
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
  if (url === '*') return req.method === 'OPTIONS' ? null : bad('the asterisk request target is only allowed with OPTIONS');
  if (url.charCodeAt(0) !== 0x2f /* / */) return bad('the request target must be a path (origin-form, e.g. /v1/payments), not an absolute URL or an authority');
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  if (path.includes('/.') && DOT_SEGMENT.test(path)) return bad('the request path contains "." or ".." segments; send the normalized path');
  return null;
}
