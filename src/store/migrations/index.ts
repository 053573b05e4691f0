// Numbered, append-only schema migrations. Never edit a migration that has
// shipped; add the next number. Applied by src/store/migrate.ts under an
// advisory lock so several instances may start at once.

import { coCommit } from './002-co-commit.js';
import { probeLease } from './003-probe.js';
import { claimFunction } from './004-claim-function.js';
import { claimTenants } from './005-claim-tenants.js';
import { tenantStatistics } from './006-tenant-statistics.js';
import { claimProbes } from './007-claim-probes.js';
import { traceContext } from './008-trace-context.js';

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

export const migrations: readonly Migration[] = [
  {
    version: 1,
    name: 'idempotency_keys',
    sql: `
CREATE TABLE idempotency_keys (
  tenant_id        text        NOT NULL,
  idem_key         text        NOT NULL,
  fingerprint      bytea       NOT NULL,
  state            text        NOT NULL CHECK (state IN ('in_flight', 'complete', 'outcome_unknown')),
  owner_token      uuid,
  attempt          integer     NOT NULL DEFAULT 1,
  on_expired_lease text        NOT NULL DEFAULT 'reexecute' CHECK (on_expired_lease IN ('reexecute', 'fail')),
  locked_until     timestamptz,
  expires_at       timestamptz NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now(),
  completed_at     timestamptz,
  status_code      integer,
  response_headers jsonb,
  response_body    bytea,
  body_retained    boolean,
  body_size        bigint,
  route            text,
  method           text,
  path             text,
  PRIMARY KEY (tenant_id, idem_key)
) WITH (fillfactor = 80);
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);
`,
  },
  coCommit,
  probeLease,
  claimFunction,
  claimTenants,
  tenantStatistics,
  claimProbes,
  traceContext,
];

export const latestVersion = migrations[migrations.length - 1]!.version;
