// Waiting in tests: one bounded poller and one sleep. Prefer waitFor (poll a
// condition) to a bare sleep: a sleep is a guess about timing.

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Polls `check` every `everyMs` until it returns something other than
 * `undefined` or `false`, and returns that; throws naming `what` once
 * `timeoutMs` has passed.
 */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 5000,
  everyMs = 25,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}
