import { randomFillSync } from 'node:crypto';

// Random trace and span id words (W3C Trace Context: random, never all
// zero), drawn from a pool the crypto RNG refills 1 024 words at a time:
// no allocation and no call into the RNG per span.

export class IdPool {
  private readonly pool = new Int32Array(1024);
  private next = this.pool.length;

  word(): number {
    if (this.next === this.pool.length) {
      randomFillSync(this.pool);
      this.next = 0;
    }
    return this.pool[this.next++]!;
  }

  /** The second word of an id whose first is `first`: never both zero. */
  lastWord(first: number): number {
    const w = this.word();
    return first === 0 && w === 0 ? 1 : w;
  }
}
