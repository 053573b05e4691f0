// Idempotency-Key generators for the load generator. Each returns the next key
// on every call; the counter is shared by all connections of one run.
import type { KeyPlan } from './types.js';

export function keySequence(plan: KeyPlan, prefix: string): () => string {
  let i = 0;
  switch (plan.kind) {
    case 'unique':
      return () => `${prefix}${i++}`;
    case 'fixed':
      return () => `${prefix}${i++ % plan.count}`;
    case 'storm':
      return () => `${prefix}${Math.floor(i++ / plan.dupes)}`;
  }
}

/** Every key of a fixed plan, in order (for warming). */
export function fixedKeys(count: number, prefix: string): string[] {
  return Array.from({ length: count }, (_, i) => `${prefix}${i}`);
}
