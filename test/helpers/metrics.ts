import { send } from './http.js';

// Reading Prometheus text in tests.

/** The admin listener's /metrics text. */
export async function metricsText(adminUrl: string | null): Promise<string> {
  if (adminUrl === null) throw new Error('no admin listener');
  return (await send(`${adminUrl}/metrics`, { method: 'GET' })).text();
}

/** Sum of every series of `name` whose labels include `labels` (0 when absent). */
export function metric(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (m === null || m[1] !== name) continue;
    const have = new Map<string, string>();
    for (const l of (m[3] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) have.set(l[1]!, l[2]!);
    if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) sum += Number(m[4]);
  }
  return sum;
}

/** The metric families a scrape declares (# TYPE lines). */
export function families(text: string): Set<string> {
  return new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]!));
}
