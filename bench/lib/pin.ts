// CPU pinning with taskset (servers on CPU 0, load generator on CPU 1).
// Falls back to no pinning when taskset is missing or there is one CPU.
import { spawnSync } from 'node:child_process';

export interface Pinning {
  readonly enabled: boolean;
  readonly reason: string;
  /** Command prefix that runs a program on `cpu`, or [] when pinning is off. */
  prefix(cpu: number): string[];
}

export function detectPinning(disabled: boolean): Pinning {
  const off = (reason: string): Pinning => ({ enabled: false, reason, prefix: () => [] });
  if (disabled) return off('disabled by BENCH_NO_PIN=1');
  for (const cpu of [0, 1]) {
    const r = spawnSync('taskset', ['-c', String(cpu), 'true'], { stdio: 'ignore' });
    if (r.error !== undefined) return off(`taskset not available (${r.error.message})`);
    if (r.status !== 0) return off(`taskset -c ${cpu} failed (fewer than 2 usable CPUs?)`);
  }
  return { enabled: true, reason: 'servers on CPU 0, load generator on CPU 1', prefix: (cpu) => ['taskset', '-c', String(cpu)] };
}
