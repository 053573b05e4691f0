// Options for node's own command line. V8 sizes its heap when the process
// starts, before any of our modules runs, so these cannot be set from
// src/v8-flags.ts: the Docker image's ENTRYPOINT, `npm start` and the
// benchmark pass them, and `serve` says at start-up when they are missing.
//
// --max-semi-space-size=4 (MiB; Node 20's default maximum is 16): the young
// generation stops at 2 x 4 MiB instead of 2 x 16 MiB. The proxy's start-up
// alone grows it to the maximum, and its pages stay resident. With 1 000 open
// connections the peak RSS was 156-158 MiB with the default, 143-147 with 8
// and 131-140 with 4. The proxy's throughput did not drop with either:
// pass-through, new key and replay from Redis measured the same or higher
// (bench/README.md, history: 2026-11-30 16:16).
export const NODE_FLAGS: readonly string[] = ['--max-semi-space-size=4'];

/** `--max_semi_space_size=4` → `--max-semi-space-size`: node and V8 accept both spellings. */
function optionName(arg: string): string {
  const eq = arg.indexOf('=');
  return (eq < 0 ? arg : arg.slice(0, eq)).replace(/_/g, '-');
}

/**
 * The NODE_FLAGS options that neither node's command line (`execArgv`) nor
 * NODE_OPTIONS set, with any value: an operator who chose another size keeps it.
 */
export function missingNodeFlags(execArgv: readonly string[], nodeOptions: string | undefined): string[] {
  const given = new Set([...execArgv, ...(nodeOptions ?? '').split(/\s+/)].filter((a) => a.startsWith('--')).map(optionName));
  return NODE_FLAGS.filter((flag) => !given.has(optionName(flag)));
}
