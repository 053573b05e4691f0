// In-process wake-ups for `onInFlight: wait`: when this instance commits or
// releases a key, duplicates waiting on it here claim again at once instead
// of at their next backoff step. Waiters on other instances back off.

export class Waiters {
  private readonly map = new Map<string, Set<() => void>>();

  /** Resolves true when the key is settled here, false after ms. */
  wait(id: string, ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      let set = this.map.get(id);
      if (set === undefined) this.map.set(id, (set = new Set()));
      const done = (woken: boolean): void => {
        clearTimeout(timer);
        const s = this.map.get(id);
        if (s !== undefined) {
          s.delete(wake);
          if (s.size === 0) this.map.delete(id);
        }
        resolve(woken);
      };
      const wake = (): void => done(true);
      const timer = setTimeout(done, ms, false);
      set.add(wake);
    });
  }

  wake(id: string): void {
    if (this.map.size === 0) return;
    const set = this.map.get(id);
    if (set === undefined) return;
    for (const fn of [...set]) fn();
  }
}

export function waiterId(tenantId: string, key: string): string {
  return `${tenantId}\u0000${key}`;
}
