import { HEARTBEAT_FLOOR_MS } from '../config/routes.js';
import type { KeyStore } from '../store/key-store.js';

// While the upstream call runs longer than a third of the lease, the lease is
// extended, so a slow upstream never lets a duplicate through. An extension
// that finds the lease taken over stops the heartbeat and says so (the commit
// will be fenced out too).

export interface Heartbeat {
  stop(): void;
}

export interface HeartbeatEvents {
  /** An extension failed (the store); the heartbeat tries again sooner. */
  readonly onError: (err: unknown) => void;
  /** An extension found the lease taken over by another request. */
  readonly onLost: () => void;
}

export function startHeartbeat(store: KeyStore, claim: { tenantId: string; key: string; ownerToken: string; leaseMs: number }, events: HeartbeatEvents): Heartbeat {
  const { tenantId, key, ownerToken, leaseMs } = claim;
  const every = Math.max(HEARTBEAT_FLOOR_MS, Math.floor(leaseMs / 3));
  let stopped = false;
  let timer: NodeJS.Timeout;
  const tick = (): void => {
    store.extend(tenantId, key, ownerToken, leaseMs).then(
      (ok) => {
        if (!ok) events.onLost();
        else if (!stopped) timer = setTimeout(tick, every);
      },
      (err) => {
        events.onError(err);
        if (!stopped) timer = setTimeout(tick, Math.min(every, 1000));
      },
    );
  };
  timer = setTimeout(tick, every);
  timer.unref();
  return {
    stop(): void {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
