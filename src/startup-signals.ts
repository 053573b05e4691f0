// Imported by src/main.ts right after src/v8-flags.ts, before the CLI's
// modules load: from the first moment until `serve` installs its drain
// handler, SIGTERM and SIGINT end the process at once (exit 143 / 130).
//
// That is what their default action does, except in a container where node
// is PID 1: the kernel drops a signal whose action is the default for a PID
// namespace's init process, so without a handler a `docker stop` during
// start-up (PGlite initdb, connecting to PostgreSQL, migrations) would be
// lost, and the container would start serving until SIGKILL.
const EXIT: Record<string, number> = { SIGTERM: 143, SIGINT: 130 };

const exitNow = (signal: NodeJS.Signals): void => {
  process.exit(EXIT[signal] ?? 1);
};

process.on('SIGTERM', exitNow);
process.on('SIGINT', exitNow);

/** Called when the drain handler takes over: from then on a signal drains instead. */
export function releaseStartupSignals(): void {
  process.off('SIGTERM', exitNow);
  process.off('SIGINT', exitNow);
}
