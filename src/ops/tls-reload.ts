import type { SecureContextOptions } from 'node:tls';
import { readListenTls } from '../config/tls-files.js';
import type { ListenTls } from '../config/types.js';
import type { Listener } from '../http/server.js';

// SIGHUP re-reads the listener's certificate, key and client CA from disk
// (docs/operations.md, Certificates): new connections get the new ones,
// connections already open keep theirs and are not dropped. A file that
// cannot be read or does not match throws (the reload is rejected, the
// running certificate kept).

const same = (a: unknown, b: unknown): boolean =>
  (a === undefined && b === undefined) || (Buffer.isBuffer(a) && Buffer.isBuffer(b) && a.equals(b));

export interface TlsReloader {
  /** Reads `tls` now; true if the material differs from what the listener had (and was swapped in). */
  reload(tls: ListenTls | null): boolean;
}

export function tlsReloader(listener: Listener, initial: SecureContextOptions | null): TlsReloader {
  let current = initial;
  return {
    reload(tls) {
      if (tls === null || current === null) return false;
      const next = readListenTls(tls);
      if (same(next.cert, current.cert) && same(next.key, current.key) && same(next.ca, current.ca)) return false;
      listener.setSecureContext(next);
      current = next;
      return true;
    },
  };
}
