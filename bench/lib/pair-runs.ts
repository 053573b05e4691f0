// The side-by-side pairs of several bench runs, read from their raw results
// (bench/results/<run>.json) and grouped for pooling (bench/pairs-summary.ts):
// runs are pooled only when they measured the same thing — the same pair
// (its id and title, which carries the traced side's setting), the same
// build (and, for a build pair, the same other build), the same Node, the
// same NODE_OPTIONS and the same priming.
import { readFileSync } from 'node:fs';
import type { PairResult } from './pair.js';

/** One run's pairs, as its raw results keep them. */
export interface RunPairs {
  readonly file: string;
  readonly startedAt: string;
  readonly node: string;
  /** The commit the run was made from (lib/output.ts); null in results written before it was recorded. */
  readonly build: string | null;
  readonly otherBuild: string | null;
  /** NODE_OPTIONS the run's processes inherited; null for none (or results written before it was recorded). */
  readonly nodeOptions: string | null;
  readonly pairs: readonly PairResult[];
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A results file's pairs; an error naming the file (and the field) when it is not one. */
export function readRunPairs(file: string): RunPairs {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`${file}: not a bench results file (${(err as Error).message})`);
  }
  if (!isObject(raw)) throw new Error(`${file}: not a bench results file (not a JSON object)`);
  const text = (field: string): string => {
    const v = raw[field];
    if (typeof v !== 'string') throw new Error(`${file}: not a bench results file (${field}: not a string)`);
    return v;
  };
  const optional = (field: string): string | null => {
    const v = raw[field];
    if (v === undefined || v === null) return null;
    if (typeof v !== 'string') throw new Error(`${file}: ${field}: not a string`);
    return v;
  };
  const pairs: PairResult[] = [];
  for (const field of ['pair', 'tracePairs', 'buildPairs']) {
    const v = raw[field];
    if (v === undefined || v === null) continue;
    const list = Array.isArray(v) ? v : [v];
    list.forEach((p, i) => {
      const where = `${file}: ${field}${Array.isArray(v) ? `[${i}]` : ''}`;
      if (!isObject(p) || !isObject(p['shape']) || typeof p['shape']['id'] !== 'string' || typeof p['shape']['title'] !== 'string' || !Array.isArray(p['rounds'])) {
        throw new Error(`${where}: not a pair's result (shape.id, shape.title, rounds)`);
      }
      if (p['primeS'] !== undefined && (typeof p['primeS'] !== 'number' || !(p['primeS'] >= 0))) throw new Error(`${where}: primeS: not a number of seconds`);
      pairs.push(p as unknown as PairResult);
    });
  }
  return {
    file, startedAt: text('startedAt'), node: text('node'), build: optional('build'), otherBuild: optional('otherBuild'),
    nodeOptions: optional('nodeOptions'), pairs,
  };
}

/** One pair measured alike in several runs: the runs that can be pooled, and those left out with why. */
export interface PairGroup {
  readonly id: string;
  readonly title: string;
  readonly node: string;
  readonly build: string | null;
  readonly otherBuild: string | null;
  readonly nodeOptions: string | null;
  /** Seconds of uncounted load before the counted rounds; null for results written before it was recorded. */
  readonly primeS: number | null;
  readonly runs: Array<{ readonly file: string; readonly startedAt: string; readonly cpuRatio: number }>;
  readonly left: Array<{ readonly file: string; readonly why: string }>;
}

/** Why a run's pair cannot be pooled, or null when it can: a round that failed, no CPU ratio, spans lost. */
function unusable(p: PairResult): string | null {
  const failed = p.rounds.find((r) => r.error !== null);
  if (failed !== undefined) return `round ${failed.round} failed (${failed.error!.split('\n')[0]!.slice(0, 80)})`;
  if (p.cpuRatio === null) return 'no CPU per request read';
  if (p.spansLost === null) return "the traced side's log could not be read for lost spans";
  if (p.spansLost !== undefined && p.spansLost > 0) return `${p.spansLost} spans lost: the traced side did less than every request sampled asks for`;
  return null;
}

/** The runs' pairs grouped by what they measured, in the order first seen; each group's runs in the order started. */
export function groupPairs(runs: readonly RunPairs[]): PairGroup[] {
  const groups = new Map<string, PairGroup>();
  const ordered = [...runs].sort((a, b) => a.startedAt.localeCompare(b.startedAt));
  for (const run of ordered) {
    for (const p of run.pairs) {
      const otherBuild = p.shape.id.startsWith('build-pair') ? run.otherBuild : null;
      const primeS = p.primeS ?? null;
      const key = JSON.stringify([p.shape.id, p.shape.title, run.node, run.build, otherBuild, run.nodeOptions, primeS]);
      let g = groups.get(key);
      if (g === undefined) {
        g = { id: p.shape.id, title: p.shape.title, node: run.node, build: run.build, otherBuild, nodeOptions: run.nodeOptions, primeS, runs: [], left: [] };
        groups.set(key, g);
      }
      const why = unusable(p);
      if (why === null) g.runs.push({ file: run.file, startedAt: run.startedAt, cpuRatio: p.cpuRatio! });
      else g.left.push({ file: run.file, why });
    }
  }
  return [...groups.values()];
}
