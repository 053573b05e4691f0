import { request } from 'undici';
import { PROBLEM_BASE } from '../../../src/http/problems.js';
import { send, type Reply } from '../../helpers/http.js';
import { sleep } from '../../helpers/wait.js';

// Client-side helpers for fault tests.

/** send(), but a network failure is a value (the proxy may be dead). */
export async function trySend(url: string, opts: Parameters<typeof send>[1]): Promise<Reply | Error> {
  try {
    return await send(url, opts);
  } catch (err) {
    return err as Error;
  }
}

export interface Settled {
  readonly reply: Reply;
  /** 409 answers seen before the final one. */
  readonly conflicts: number;
  /** Time from the first attempt to the final answer. */
  readonly ms: number;
}

/** Retries while the answer is 409 in-flight (as a client honouring Retry-After would, faster). */
export async function retryWhileInFlight(url: string, opts: Parameters<typeof send>[1], maxMs: number, everyMs = 100): Promise<Settled> {
  const t0 = Date.now();
  let conflicts = 0;
  for (;;) {
    const reply = await send(url, opts);
    const inFlight = reply.status === 409 && reply.json().type === `${PROBLEM_BASE}in-flight`;
    if (!inFlight) return { reply, conflicts, ms: Date.now() - t0 };
    conflicts++;
    if (Date.now() - t0 > maxMs) throw new Error(`still 409 in-flight after ${maxMs} ms (${conflicts} attempts): the key is stuck`);
    await sleep(everyMs);
  }
}

export interface Streamed {
  readonly status: number | null;
  /** Body bytes received before the end or the failure. */
  readonly received: () => string;
  /** Resolves 'complete' or 'broken' when the exchange ends. */
  readonly end: Promise<'complete' | 'broken'>;
}

/** A request whose response body the test watches arrive chunk by chunk. */
export async function streamed(url: string, opts: { headers: Record<string, string>; body: string }): Promise<Streamed | Error> {
  let data = '';
  try {
    const r = await request(url, { method: 'POST', headers: opts.headers, body: opts.body });
    const end = (async (): Promise<'complete' | 'broken'> => {
      try {
        for await (const c of r.body) data += (c as Buffer).toString();
        return 'complete';
      } catch {
        return 'broken';
      }
    })();
    return { status: r.statusCode, received: () => data, end };
  } catch (err) {
    return err as Error;
  }
}
