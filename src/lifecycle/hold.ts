import type { RequestContext } from './context.js';
import type { LifecycleDeps } from './deps.js';
import { startHeartbeat, type Heartbeat } from './heartbeat.js';
import { waiterId } from './waiters.js';

// A key this request claimed, from the claim until it is committed or
// released (or the request failed): counted in the keys-in-flight gauge that
// graceful shutdown waits on, kept alive by the lease heartbeat, and, when
// it ends, waking the duplicates that wait on it here (onInFlight: wait).

export class KeyHold {
  private readonly heartbeat: Heartbeat;
  private ended = false;

  constructor(private readonly deps: LifecycleDeps, private readonly ctx: RequestContext) {
    deps.metrics.inFlight.inc();
    const claim = ctx.claim!;
    this.heartbeat = startHeartbeat(deps.store, claim, {
      onError: (err) => deps.logger.warn({ requestId: ctx.requestId, err: (err as Error).message }, 'lease extension failed'),
      onLost: () => {
        deps.metrics.leaseLost.inc({ route: claim.route });
        deps.logger.warn({ requestId: ctx.requestId }, 'lease taken over while the upstream was still working; the commit will be fenced out');
      },
    });
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.heartbeat.stop();
    this.deps.metrics.inFlight.dec();
    this.deps.waiters.wake(waiterId(this.ctx.tenantId, this.ctx.key!));
  }
}
