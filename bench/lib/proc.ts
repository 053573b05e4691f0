// Memory and CPU figures of a live process, from /proc/<pid>/status,
// /proc/<pid>/stat and its threads' /proc/<pid>/task/<tid>/schedstat (Linux only).
import { readdirSync, readFileSync } from 'node:fs';

export interface MemoryFigures {
  readonly rssMiB: number; // VmRSS now
  readonly hwmMiB: number; // VmHWM: peak RSS since the process started
}

function kib(status: string, field: string): number | null {
  const m = new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm').exec(status);
  return m?.[1] === undefined ? null : Number(m[1]);
}

/** /proc/<pid>/<file>, or null once the process is gone. */
function procFile(pid: number, file: string): string | null {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8');
  } catch {
    return null;
  }
}

export function readMemory(pid: number): MemoryFigures | null {
  const status = procFile(pid, 'status');
  if (status === null) return null;
  const rss = kib(status, 'VmRSS');
  const hwm = kib(status, 'VmHWM');
  if (rss === null || hwm === null) return null;
  return { rssMiB: Math.round(rss / 102.4) / 10, hwmMiB: Math.round(hwm / 102.4) / 10 };
}

/** CPU time the process (all its threads) has used, user + system, in clock ticks (USER_HZ, 100 a second on Linux). */
export function readCpuTicks(pid: number): number | null {
  const stat = procFile(pid, 'stat');
  if (stat === null) return null;
  // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const utime = Number(rest[11]);
  const stime = Number(rest[12]);
  return Number.isFinite(utime) && Number.isFinite(stime) ? utime + stime : null;
}

export const CLOCK_TICKS_PER_S = 100;

/** A process's CPU time in nanoseconds, and which of its threads it sums (their ids, sorted, comma-separated). */
export interface CpuNs {
  readonly ns: number;
  readonly threads: string;
}

/**
 * CPU time the process has used, in nanoseconds: the sum of its threads' time on a CPU
 * (/proc/<pid>/task/<tid>/schedstat, first field). /proc/<pid>/stat counts in clock ticks (10 ms): over the
 * pairs' 3-second windows a busy proxy uses 80–120 ticks, so one tick either way is about 1 % of a reading.
 * A thread that ends takes its time with it, so two readings compare only when they summed the same threads
 * (cpuNsBetween). null once the process is gone.
 */
export function readCpuNs(pid: number): CpuNs | null {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`).sort();
  } catch {
    return null;
  }
  let ns = 0;
  for (const tid of tids) {
    const stat = procFile(pid, `task/${tid}/schedstat`);
    if (stat === null) return null; // a thread ended between the listing and its reading
    const run = Number(stat.slice(0, stat.indexOf(' ')));
    if (!Number.isFinite(run)) return null;
    ns += run;
  }
  return { ns, threads: tids.join(',') };
}

/** Nanoseconds of CPU between two readings of one process, or null when its threads were not the same ones. */
export function cpuNsBetween(before: CpuNs | null, after: CpuNs | null): number | null {
  return before === null || after === null || before.threads !== after.threads ? null : after.ns - before.ns;
}
