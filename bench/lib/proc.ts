// Memory and CPU figures of a live process, from /proc/<pid>/status and
// /proc/<pid>/stat (Linux only).
import { readFileSync } from 'node:fs';

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
