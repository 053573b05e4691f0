#!/usr/bin/env node
// Entry point: the only place that touches argv, process.exit and signals.
import { hideBin } from 'yargs/helpers';
import { runCli } from './cli/index.js';

const code = await runCli(hideBin(process.argv), {
  env: process.env,
  stdout: process.stdout,
  stderr: process.stderr,
  onShutdownSignal: (fn) => {
    let count = 0;
    const handler = (sig: NodeJS.Signals): void => {
      count++;
      if (count > 1) process.exit(130); // second signal: stop now
      fn(sig);
    };
    process.on('SIGTERM', handler);
    process.on('SIGINT', handler);
  },
});
process.exitCode = code;
