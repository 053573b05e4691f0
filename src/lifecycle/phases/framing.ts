import { checkFraming } from '../../http/framing.js';
import { NEXT, problem, type SyncPhase } from '../verdict.js';

// Phase "framing": what Node's HTTP parser lets through but a reverse proxy
// must not forward (src/http/framing.ts) is answered here and the connection
// closed; it is never routed, claimed or forwarded. (What the parser itself
// refuses never reaches a phase: src/http/server.ts answers it on the socket.)

export const framingPhase: SyncPhase = {
  name: 'framing',
  run: (_deps, ctx) => {
    const f = checkFraming(ctx.req);
    if (f === null) return NEXT;
    return problem(f.problem, f.detail, 'rejected', { status: f.status, close: true });
  },
};
