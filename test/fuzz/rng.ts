// A seeded xorshift32: the same seed gives the same requests, behaviours and client modes.
export type Rng = () => number;

export function rng(seed: number): Rng {
  let s = (Math.imul(seed, 2654435761) >>> 0) || 1;
  return () => {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

export const pick = <T>(r: Rng, a: readonly T[]): T => a[Math.floor(r() * a.length)]!;
