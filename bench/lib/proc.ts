// Memory figures of a live process, from /proc/<pid>/status (Linux only).
import { readFileSync } from 'node:fs';

export interface MemoryFigures {
  readonly rssMiB: number; // VmRSS now
  readonly hwmMiB: number; // VmHWM: peak RSS since the process started
}

function kib(status: string, field: string): number | null {
  const m = new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm').exec(status);
  return m?.[1] === undefined ? null : Number(m[1]);
}

export function readMemory(pid: number): MemoryFigures | null {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return null;
  }
  const rss = kib(status, 'VmRSS');
  const hwm = kib(status, 'VmHWM');
  if (rss === null || hwm === null) return null;
  return { rssMiB: Math.round(rss / 102.4) / 10, hwmMiB: Math.round(hwm / 102.4) / 10 };
}
