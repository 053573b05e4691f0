// SIGHUP re-reads TLS files from disk (docs/operations.md, Certificates): the
// listener's certificate, key and client CA, and the upstream's CA bundle,
// client certificate and key. New connections get what was read; connections
// already open keep theirs and are not dropped. A file that cannot be read or
// does not match throws (the reload is rejected, the running material kept).
// One implementation for both: read, compare with what is in use, swap in.

/** What a TLS configuration reads to: PEM buffers, and the upstream's servername. */
export type TlsMaterial = Readonly<Record<string, Buffer | string | undefined>>;

const same = (a: TlsMaterial, b: TlsMaterial): boolean => {
  for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
    const x = a[k];
    const y = b[k];
    if (x === y) continue;
    if (!(Buffer.isBuffer(x) && Buffer.isBuffer(y) && x.equals(y))) return false;
  }
  return true;
};

export interface TlsReloader<C> {
  /** Reads `tls` now; true if the material differs from what was in use (and was swapped in). */
  reload(tls: C | null): boolean;
}

/**
 * `read` turns the configuration into material (throwing on a bad file),
 * `apply` hands new material to the listener or the upstream connector.
 * Null on either side (TLS off before or after): nothing to swap, a restart
 * decides (src/ops/reload-plan.ts).
 */
export function tlsReloader<C, M extends TlsMaterial>(read: (tls: C) => M, apply: (m: M) => void, initial: M | null): TlsReloader<C> {
  let current = initial;
  return {
    reload(tls) {
      if (tls === null || current === null) return false;
      const next = read(tls);
      if (same(next, current)) return false;
      apply(next);
      current = next;
      return true;
    },
  };
}
