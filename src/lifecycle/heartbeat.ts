import type { KeyStore } from '../store/key-store.js';

// While the upstream call runs longer than a third of the lease, the lease is
// extended, so a slow upstream never lets a duplicate through.

export interface Heartbeat {
  stop(): void;
  /** False once an extension found the lease taken over. */
  readonly held: boolean;
}

export function startHeartbeat(
  store: KeyStore,
  tenantId: string,
  key: string,
  ownerToken: string,
  leaseMs: number,
  onError: (err: unknown) => void,
): Heartbeat {
  const every = Math.max(50, Math.floor(leaseMs / 3));
  let stopped = false;
  let timer: NodeJS.Timeout;
  const hb = {
    held: true,
    stop(): void {
      stopped = true;
      clearTimeout(timer);
    },
  };
  const tick = (): void => {
    store.extend(tenantId, key, ownerToken, leaseMs).then(
      (ok) => {
        if (!ok) hb.held = false;
        else if (!stopped) timer = setTimeout(tick, every);
      },
      (err) => {
        onError(err);
        if (!stopped) timer = setTimeout(tick, Math.min(every, 1000));
      },
    );
  };
  timer = setTimeout(tick, every);
  timer.unref();
  return hb;
}
