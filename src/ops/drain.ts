import type http from 'node:http';
import type { H2Front } from '../http/h2.js';

// Graceful stop of the client listener (SIGTERM/SIGINT): no new connections;
// requests already on a connection finish, their responses saying
// `Connection: close`; keep-alive connections close as soon as they are idle;
// and the claimed requests still committing (even for clients that went away)
// finish. When the deadline passes first, every connection is cut.

export interface DrainOptions {
  readonly deadlineMs: number;
  /** Work that must finish even when its client left: claimed keys committing or releasing. */
  readonly idle: () => Promise<void>;
  /** How often idle keep-alive connections are closed while draining. */
  readonly pollMs?: number;
  /** HTTP/2 sessions on the listener: GOAWAY at once, their open streams finish. */
  readonly h2?: H2Front | null;
}

export interface DrainResult {
  /** True when the deadline passed and connections were cut. */
  readonly forced: boolean;
  readonly ms: number;
}

export async function drainServer(server: http.Server, opts: DrainOptions): Promise<DrainResult> {
  const t0 = performance.now();
  const markClose = (_req: http.IncomingMessage, res: http.ServerResponse): void => {
    // HTTP/2 has no Connection header: its sessions get a GOAWAY instead.
    if (!res.headersSent && _req.httpVersionMajor < 2) res.setHeader('connection', 'close');
  };
  server.prependListener('request', markClose);
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  opts.h2?.goAway();
  const poll = setInterval(() => server.closeIdleConnections(), opts.pollMs ?? 50);
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'deadline'>((resolve) => {
    timer = setTimeout(() => resolve('deadline'), opts.deadlineMs);
  });
  try {
    const drained = Promise.all([closed, opts.idle()]).then(() => 'drained' as const);
    const result = await Promise.race([drained, deadline]);
    if (result === 'deadline') {
      server.closeAllConnections();
      opts.h2?.destroyAll();
      await closed;
    }
    return { forced: result === 'deadline', ms: performance.now() - t0 };
  } finally {
    clearTimeout(timer);
    clearInterval(poll);
    server.off('request', markClose);
  }
}
