import { createHash } from 'node:crypto';
import pino, { type Logger, type DestinationStream } from 'pino';

export type { Logger };

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'idempotency-proxy' },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: ['authorization', '*.authorization', 'databaseUrl', 'redisUrl'], censor: '[redacted]' },
    },
    destination ?? pino.destination({ fd: 1, sync: false }),
  );
}

/** Keys appear in logs only as a short hash. */
export function keyHash(tenantId: string, key: string): string {
  return createHash('sha256').update(tenantId).update('\u0000').update(key).digest('hex').slice(0, 12);
}
