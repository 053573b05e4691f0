import { PROBLEM_BASE, PROBLEM_CONTENT_TYPE, Problems } from '../http/problems.js';

// What a key resolved as `executed` replays (docs/operations.md, Admin API):
// the operation ran, its response was never recorded, and the proxy does not
// know the original status. Stored as the key's complete record and replayed
// with Idempotent-Replayed: true like any other, so the operation never runs
// again for the key. 409 (not 2xx: the proxy cannot make up the upstream's
// answer, and a client must not parse this as one; not 5xx: clients retry
// those), a problem body with its own type, `originalStatus: null`.

export interface ExecutedRecord {
  readonly status: number;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly body: Buffer;
}

export function executedRecord(resolvedAt: Date): ExecutedRecord {
  const p = Problems.executedUnrecorded;
  const body = {
    type: PROBLEM_BASE + p.slug,
    title: p.title,
    status: p.status,
    detail: 'the operation behind this idempotency key ran, but its response was not recorded (the proxy holding the key stopped first), '
      + 'and an operator resolved the key as executed; the original status and body are unknown. '
      + 'The operation will not run again for this key: read the resource to learn its result.',
    originalStatus: null,
    resolvedAt: resolvedAt.toISOString(),
  };
  return { status: p.status, headers: [['content-type', PROBLEM_CONTENT_TYPE]], body: Buffer.from(JSON.stringify(body)) };
}
