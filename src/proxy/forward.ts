import type { IncomingMessage } from 'node:http';
import { CLAIM_HEADER, upstreamRequestHeaders } from './headers.js';

// What goes upstream besides the body: the request headers (headers.ts rules)
// from what the client sent. The exchange itself is relay.ts.

/**
 * The request headers for the upstream from what the client sent; `claim`:
 * the Idempotency-Claim token of a request that owns its key (docs/co-commit.md).
 */
export function forwardHeaders(req: IncomingMessage, body: Buffer | IncomingMessage | null, claim?: string): string[] {
  const socket = req.socket;
  const out = upstreamRequestHeaders(req.rawHeaders, req.headers, {
    clientIp: socket.remoteAddress ?? '',
    proto: (socket as { encrypted?: boolean }).encrypted ? 'https' : 'http',
    host: req.headers.host,
  }, Buffer.isBuffer(body));
  if (claim !== undefined) out.push(CLAIM_HEADER, claim);
  return out;
}
