import { setFlagsFromString } from 'node:v8';

// Imported first by src/main.ts, before any other module is evaluated.
//
// V8's allocation-site pretenuring moves an allocation site's objects
// straight into the old generation once enough of them survive a scavenge.
// Under the proxy's load (every request allocates short-lived objects that
// point at each other: socket, parser, request, response, context, buffers)
// that decision, once taken for a site, keeps the objects it allocates alive
// past their request: dead old-generation objects still point into the young
// generation, so each scavenge copies and promotes what they point to, and a
// third of the young generation is promoted on every scavenge until the next
// full GC. Whether a process falls into that state is decided early and at
// random; in it, scavenges took 10 ms instead of 2.5 ms and the pass-through
// path cost 30–50 µs more per request (bench/README.md, history). Without
// pretenuring, 12 of 12 starts stayed in the normal state, against 8 of 12
// falling out of it with the default.
setFlagsFromString('--no-allocation-site-pretenuring');

// Maglev, V8's mid-tier optimizing compiler, is off by default in the V8 of
// Node 20 and of Node 22 (22.23.5: `node --v8-options`) and on in Node 24's,
// the version the Docker image runs. On Node 24 a proxy with it spent about
// 5 % more CPU per request than one without, new keys and replays alike, in
// its first minutes under load, and two identical proxies with it read 2–4 %
// apart where two without it read within about 1.5 % (build pairs on Node 24,
// both ways round: docs/tracing-cost.md, 2026-12-05, midday). Turned off here,
// before any of the proxy's code has run hot (Node's module loader has run
// by now), every supported Node runs the proxy's code through the same tiers:
// the interpreter, Sparkplug, then TurboFan. test/ops/v8-flags.test.ts checks
// it from V8's own trace.
setFlagsFromString('--no-maglev');
