// What every part of one benchmark run needs, built once in run.ts.
import type { Children } from './children.js';
import type { LoadRunner } from './load-runner.js';
import type { RunOptions } from './options.js';
import type { Pinning } from './pin.js';

export interface BenchContext {
  readonly opts: RunOptions;
  readonly pin: Pinning;
  readonly children: Children;
  readonly load: LoadRunner;
  readonly runId: string; // prefix of every Idempotency-Key this run sends
  readonly distRoot: string; // compiled output: <distRoot>/bench/*.js, <distRoot>/src/main.js
  readonly projectRoot: string; // bench/proxy.yaml, bench/results/
  readonly tmp: string; // logs, embedded data directories
  log(msg: string): void;
  /** True once SIGINT/SIGTERM arrived: start nothing new. */
  interrupted(): boolean;
}

export const REQUEST_BODY = '{"amount":1250,"currency":"eur","reference":"bench-order","items":[{"sku":"A-1","qty":2}]}';
