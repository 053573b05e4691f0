import type { IncomingMessage } from 'node:http';
import { upstreamRequestHeaders } from './headers.js';

// What goes upstream besides the body: the request headers (headers.ts rules)
// from what the client sent. The exchange itself is relay.ts.

/** The request headers for the upstream from what the client sent. */
export function forwardHeaders(req: IncomingMessage, body: Buffer | IncomingMessage | null): string[] {
  const socket = req.socket;
  return upstreamRequestHeaders(req.rawHeaders, req.headers, {
    clientIp: socket.remoteAddress ?? '',
    proto: (socket as { encrypted?: boolean }).encrypted ? 'https' : 'http',
    host: req.headers.host,
  }, Buffer.isBuffer(body));
}
