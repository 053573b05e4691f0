import { readFileSync, statSync } from 'node:fs';

// Spans the traced proxy of the tracing pairs dropped (a full queue, a failed
// export), read from its log: the proxy logs 'tracing: spans lost' with how
// many at once for the first loss and at most every 10 s after, so any loss
// shows, and the sum is at least what was lost. A pair whose traced side lost
// spans encoded and sent fewer than every request sampled asks for: its CPU
// per request reads low.

/** The log's size now: where the next pair's lines start. */
export function logOffset(file: string): number {
  try {
    return statSync(file).size;
  } catch {
    return 0;
  }
}

/** Spans the proxy logged as lost after `from` (bytes into its log); null when the log cannot be read. */
export function spansLostSince(file: string, from: number): number | null {
  let text: string;
  try {
    text = readFileSync(file).subarray(from).toString('utf8');
  } catch {
    return null;
  }
  let lost = 0;
  for (const line of text.split('\n')) {
    if (!line.includes('tracing: spans lost')) continue;
    try {
      const spans = (JSON.parse(line) as { spans?: unknown }).spans;
      lost += typeof spans === 'number' ? spans : 1;
    } catch {
      lost += 1;
    }
  }
  return lost;
}
