import type { RunningProxy } from '../../src/app.js';
import { createTestDatabase, sql, type TestDatabase } from '../helpers/db.js';
import { send, type Reply } from '../helpers/http.js';
import type { SpawnedProxy } from '../helpers/proxy.js';
import { startControlledUpstream, type ControlledUpstream, type Exchange } from '../faults/helpers/controlled-upstream.js';
import type { KeyName, Payload, ProxyName, Tenant } from './reference.js';
import { spawnFromYaml, startTestProxy } from '../helpers/proxy.js';

// The real system under the model: two in-process proxies (A, B) and one
// spawned proxy (C, the one that gets SIGKILLed) on one database, in front of
// one upstream that answers at once or holds the answer until told.

export const MODEL_YAML = `
upstream: { timeout: 60s }
store: { sweepInterval: 1h }
defaults:
  lease: 5m
  ttl: 1h
  tenant: { fromHeader: x-tenant }
routes:
  - name: re
    match: { path: "/re/**" }
  - name: fail
    match: { path: "/fail/**" }
    onExpiredLease: fail
`;

export interface Pending {
  readonly exchange: Exchange;
  readonly reply: Promise<Reply | Error>;
}

export class RealSystem {
  /** Key prefix of the current run: runs never share keys. */
  prefix = '';
  readonly pending = new Map<number, Pending>();
  private c: SpawnedProxy | null = null;
  private req = 0;

  private constructor(readonly db: TestDatabase, readonly up: ControlledUpstream, readonly a: RunningProxy, readonly b: RunningProxy) {}

  static async start(): Promise<RealSystem> {
    const db = await createTestDatabase();
    const up = await startControlledUpstream((ex) => {
      if (ex.headers['x-hold'] === '1') return; // the model answers it (FinishCmd)
      ex.respond(201, JSON.stringify({ n: ex.n, t: ex.headers['x-tenant'], k: ex.key }));
    });
    const a = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: MODEL_YAML });
    const b = await startTestProxy({ upstream: up.url, databaseUrl: db.url, yaml: MODEL_YAML });
    return new RealSystem(db, up, a, b);
  }

  async url(p: ProxyName): Promise<string> {
    if (p === 'A') return this.a.url;
    if (p === 'B') return this.b.url;
    this.c ??= await spawnFromYaml({ upstream: this.up.url, databaseUrl: this.db.url, yaml: MODEL_YAML });
    return this.c.url;
  }

  async killC(): Promise<void> {
    const c = this.c;
    this.c = null;
    await c?.kill();
  }

  fullKey(k: KeyName): string {
    return `${this.prefix}${k}`;
  }

  /** Sends one request; `hold` asks the upstream to keep its answer. Network failures are values. */
  request(proxyUrl: string, t: Tenant, k: KeyName, fp: Payload, hold: boolean): { id: string; reply: Promise<Reply | Error> } {
    const id = String(++this.req);
    const path = k === 'k2' ? '/fail/1' : '/re/1';
    const headers: Record<string, string> = {
      'idempotency-key': this.fullKey(k), 'x-tenant': t, 'content-type': 'application/json', 'x-model-req': id,
    };
    if (hold) headers['x-hold'] = '1';
    const reply = send(`${proxyUrl}${path}`, { headers, body: JSON.stringify({ v: fp }) }).catch((e: Error) => e);
    return { id, reply };
  }

  executions(t: Tenant, k: KeyName): number {
    const key = this.fullKey(k);
    return this.up.exchanges.filter((e) => e.key === key && e.headers['x-tenant'] === t).length;
  }

  async sql(text: string, values: unknown[]): Promise<Array<Record<string, unknown>>> {
    return sql(this.db.url, text, values);
  }

  async close(): Promise<void> {
    await this.killC();
    await this.a.close();
    await this.b.close();
    await this.up.close();
    await this.db.drop();
  }
}
