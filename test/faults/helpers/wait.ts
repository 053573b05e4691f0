// Small timing helpers for fault tests: bounded polling, never open-ended sleeps.

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls fn until it returns a value other than undefined/false, or throws after timeoutMs. */
export async function waitUntil<T>(fn: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs: number, what: string, everyMs = 25): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}
