// Keeps one server process on a leash: starts it in its own process group
// with stdout/stderr going to a log file, reports its pid on stdout, and kills
// the whole group as soon as our stdin closes — which also happens when the
// harness dies without cleaning up (even on SIGKILL). Exits with the child.
//
//   node dist/bench/guard.js --log FILE -- taskset -c 0 node server.js ...
//   → prints {"pid":N}, later {"exit":code,"signal":sig}
import { spawn } from 'node:child_process';
import { openSync } from 'node:fs';
import { isEntry } from './lib/cli-args.js';

const KILL_GRACE_MS = 5_000;

function main(): void {
  const argv = process.argv.slice(2);
  const sep = argv.indexOf('--');
  const logAt = argv.indexOf('--log');
  const log = logAt >= 0 ? argv[logAt + 1] : undefined;
  const cmd = sep >= 0 ? argv.slice(sep + 1) : [];
  const [file, ...args] = cmd;
  if (log === undefined || file === undefined) throw new Error('usage: guard.js --log FILE -- CMD [ARGS...]');
  const fd = openSync(log, 'a');
  const child = spawn(file, args, { stdio: ['ignore', fd, fd], detached: true });
  const pid = child.pid;
  if (pid === undefined) throw new Error(`cannot start ${file}`);
  process.stdout.write(`${JSON.stringify({ pid })}\n`);

  let stopping = false;
  const signalGroup = (sig: NodeJS.Signals): void => {
    try {
      process.kill(-pid, sig);
    } catch {
      // already gone
    }
  };
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    signalGroup('SIGTERM');
    setTimeout(() => signalGroup('SIGKILL'), KILL_GRACE_MS).unref();
  };
  child.on('exit', (code, signal) => {
    signalGroup('SIGKILL'); // stragglers the child left in its group
    process.stdout.write(`${JSON.stringify({ exit: code, signal })}\n`, () => process.exit(code ?? 1));
  });
  process.stdin.on('end', stop);
  process.stdin.on('close', stop);
  process.stdin.on('error', stop);
  process.stdin.resume();
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(sig, stop);
}

if (isEntry(import.meta.url)) {
  try {
    main();
  } catch (err) {
    process.stderr.write(`guard: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
}
