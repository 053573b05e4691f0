import type { TLSSocket } from 'node:tls';
import type { Logger } from '../log/logger.js';
import type { FastCounter } from '../metrics/fast.js';

// TLS handshakes the listener refused (Node's `tlsClientError`): a client
// without a certificate under mTLS, one whose certificate did not verify, a
// client speaking plain HTTP or an old protocol to the TLS port, no shared
// cipher or ALPN protocol. Each is counted by reason
// (idempotency_proxy_tls_handshakes_refused_total) and logged at warn with
// the peer's address — at most LOG_BURST lines per LOG_WINDOW_MS, so a
// scanner cannot flood the log; the count says the rest (docs/operations.md,
// Certificates). A client that disconnects before finishing its handshake (a
// load balancer's TCP health check) is counted as `disconnected` and logged
// at debug only: nothing was refused.

export const TLS_REFUSAL_REASONS = ['no_client_certificate', 'bad_client_certificate', 'protocol', 'timeout', 'disconnected', 'other'] as const;
export type TlsRefusalReason = (typeof TLS_REFUSAL_REASONS)[number];

const LOG_WINDOW_MS = 60_000;
const LOG_BURST = 10;

/** The reason label for a handshake error, from OpenSSL's and Node's codes. */
export function refusalReason(err: NodeJS.ErrnoException): TlsRefusalReason {
  const code = err.code ?? '';
  if (code === 'ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE') return 'no_client_certificate';
  if (/CERTIFICATE|CERT_|UNABLE_TO_|SELF_SIGNED/.test(code)) return 'bad_client_certificate';
  if (code === 'ERR_TLS_HANDSHAKE_TIMEOUT') return 'timeout';
  if (code === 'ECONNRESET' || code === 'EPIPE' || /socket disconnected/i.test(err.message)) return 'disconnected';
  if (code.startsWith('ERR_SSL_')) return 'protocol'; // wrong version, HTTP to HTTPS, no shared cipher, no ALPN protocol…
  return 'other';
}

export interface TlsRefusals {
  /** The listener's `tlsClientError` handler: counts, logs (bounded) and closes the socket. */
  readonly onError: (err: NodeJS.ErrnoException, socket: TLSSocket) => void;
}

export function tlsRefusals(logger: Logger, counter: FastCounter<'reason'>, now: () => number = Date.now): TlsRefusals {
  const counters = new Map(TLS_REFUSAL_REASONS.map((r) => [r, counter.labels(r)]));
  let windowStart = -Infinity;
  let logged = 0;
  let suppressed = 0;
  return {
    onError(err, socket) {
      const reason = refusalReason(err);
      counters.get(reason)!.inc();
      const peer = socket.remoteAddress === undefined ? null : `${socket.remoteAddress}:${socket.remotePort ?? '?'}`;
      socket.destroy();
      const fields = { peer, reason, code: err.code ?? null, err: err.message };
      if (reason === 'disconnected') {
        logger.debug(fields, 'TLS handshake not finished: the client disconnected');
        return;
      }
      const t = now();
      if (t - windowStart >= LOG_WINDOW_MS) {
        windowStart = t;
        logged = 0;
        if (suppressed > 0) logger.warn({ suppressed }, 'TLS handshakes refused and not logged in the last window (idempotency_proxy_tls_handshakes_refused_total counts every one)');
        suppressed = 0;
      }
      if (logged >= LOG_BURST) {
        suppressed += 1;
        return;
      }
      logged += 1;
      const more = logged === LOG_BURST ? ' (further refusals this minute are counted, not logged)' : '';
      logger.warn(fields, `TLS handshake refused${more}`);
    },
  };
}
