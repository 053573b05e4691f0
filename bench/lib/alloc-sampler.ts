// Loaded into a proxy by bench/proxy-count.ts --alloc (`node --import` this
// file): V8's sampling heap profiler, started and stopped by SIGUSR2, with
// the objects the collector has already freed kept in the profile — so the
// profile is what the window allocated, not what is still alive at its end
// (node's --heap-prof keeps only the live ones). Each stop writes the
// profile to $IDEM_ALLOC_DIR/alloc-<pid>-<n>.json. Not part of the proxy:
// nothing here runs unless the bench loads it.
import { renameSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { join } from 'node:path';

/** Bytes between samples (V8's default is 32 KiB): small, for a window of tens of thousands of requests. */
const SAMPLING_INTERVAL = 512;

const dir = process.env['IDEM_ALLOC_DIR'];
if (dir !== undefined && dir !== '') {
  const session = new Session();
  session.connect();
  let sampling = false;
  let written = 0;
  process.on('SIGUSR2', () => {
    if (!sampling) {
      sampling = true;
      // includeObjectsCollectedBy*: in the DevTools protocol, not yet in @types/node's parameter type.
      const params = { samplingInterval: SAMPLING_INTERVAL, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true };
      session.post('HeapProfiler.startSampling', params as { samplingInterval: number });
      return;
    }
    sampling = false;
    session.post('HeapProfiler.stopSampling', (err, res) => {
      written += 1;
      const file = join(dir, `alloc-${process.pid}-${written}.json`);
      // Written whole, then named: the bench waits for the name.
      writeFileSync(`${file}.part`, JSON.stringify(err === null ? res.profile : { error: err.message }));
      renameSync(`${file}.part`, file);
    });
  });
}
