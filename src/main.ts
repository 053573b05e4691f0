#!/usr/bin/env node
// Entry point: the only place that touches argv, process.exit and signals
// (with src/startup-signals.ts, which it imports for the start-up window).
import './v8-flags.js'; // first: V8 settings before any other module runs
import { releaseStartupSignals } from './startup-signals.js'; // second: SIGTERM during start-up exits
import { hideBin } from 'yargs/helpers';
import { runCli } from './cli/index.js';

const code = await runCli(hideBin(process.argv), {
  env: process.env,
  nodeArgs: process.execArgv,
  stdout: process.stdout,
  stderr: process.stderr,
  onShutdownSignal: (fn) => {
    let count = 0;
    const handler = (sig: NodeJS.Signals): void => {
      count++;
      if (count > 1) process.exit(130); // second signal: stop now
      fn(sig);
    };
    releaseStartupSignals();
    process.on('SIGTERM', handler);
    process.on('SIGINT', handler);
  },
  onReloadSignal: (fn) => {
    process.on('SIGHUP', () => fn());
  },
});
process.exitCode = code;
// Everything is closed by now; a handle some library forgot must not keep a
// stopped proxy alive (unref'd: a clean exit does not wait for it).
setTimeout(() => process.exit(code), 3000).unref();
