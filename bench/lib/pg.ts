// The benchmark's own PostgreSQL databases: created fresh for each run (the
// proxy migrates them at start), seeded for the table-size scenario, dropped
// at the end. Never touches any other database or server setting.
import pg from 'pg';

const NAME = /^[a-z_][a-z0-9_]{0,62}$/;

function checkName(name: string): string {
  if (!NAME.test(name)) throw new Error(`not a safe database name: ${name}`);
  return name;
}

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export function databaseUrl(adminUrl: string, name: string): string {
  const u = new URL(adminUrl);
  u.pathname = `/${checkName(name)}`;
  return u.toString();
}

export async function recreateDatabase(adminUrl: string, name: string): Promise<string> {
  await withClient(adminUrl, async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${checkName(name)} WITH (FORCE)`);
    await c.query(`CREATE DATABASE ${checkName(name)}`);
  });
  return databaseUrl(adminUrl, name);
}

export async function dropDatabase(adminUrl: string, name: string): Promise<void> {
  await withClient(adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${checkName(name)} WITH (FORCE)`));
}

export async function durabilitySettings(url: string): Promise<Record<string, string>> {
  return withClient(url, async (c) => {
    const r = await c.query<{ name: string; setting: string }>(
      `SELECT name, setting FROM pg_settings WHERE name IN ('fsync','synchronous_commit','shared_buffers','server_version')`,
    );
    return Object.fromEntries(r.rows.map((row) => [row.name, row.setting]));
  });
}

interface Column {
  name: string;
  type: string;
  nullable: boolean;
  hasDefault: boolean;
}

/** The key table the proxy's migrations created: BENCH_TABLE, or the one with tenant_id and idem_key. */
async function keyTable(c: pg.Client, wanted: string | null): Promise<{ table: string; columns: Column[] }> {
  const r = await c.query<{ table_name: string; column_name: string; data_type: string; is_nullable: string; column_default: string | null }>(
    `SELECT table_name, column_name, data_type, is_nullable, column_default
       FROM information_schema.columns
      WHERE table_schema = current_schema()
      ORDER BY table_name, ordinal_position`,
  );
  const byTable = new Map<string, Column[]>();
  for (const row of r.rows) {
    const cols = byTable.get(row.table_name) ?? [];
    cols.push({ name: row.column_name, type: row.data_type, nullable: row.is_nullable === 'YES', hasDefault: row.column_default !== null });
    byTable.set(row.table_name, cols);
  }
  for (const [table, columns] of byTable) {
    const names = new Set(columns.map((col) => col.name));
    if (wanted === null ? names.has('tenant_id') && names.has('idem_key') : table === wanted) return { table, columns };
  }
  throw new Error(`no key table found (looked for ${wanted ?? 'a table with tenant_id and idem_key'}; set BENCH_TABLE)`);
}

// What each column of docs/storage.md gets in a seeded row: completed records of the
// bench tenant, valid for a day, keys spread like random client keys.
const BY_NAME: Record<string, string> = {
  tenant_id: `'bench'`,
  idem_key: `'seed-' || md5(g::text)`,
  state: `'complete'`,
  locked_until: `now()`,
  expires_at: `now() + interval '7 days'`,
  created_at: `now()`,
  completed_at: `now()`,
  status_code: `200`,
  response_headers: `'{}'`,
  response_body: `'\\x7b226f6b223a747275657d'::bytea`,
  route: `'newkey'`,
  method: `'POST'`,
  path: `'/bench/seed'`,
};

const BY_TYPE: Record<string, string> = {
  text: `'seed'`,
  'character varying': `'seed'`,
  integer: '0',
  bigint: '0',
  smallint: '0',
  bytea: `'\\x'::bytea`,
  jsonb: `'{}'`,
  json: `'{}'`,
  boolean: 'false',
  uuid: 'gen_random_uuid()',
  'timestamp with time zone': 'now()',
  'timestamp without time zone': 'now()',
};

/** Inserts rows first..last (one INSERT … SELECT generate_series), then ANALYZE. */
export async function seedRows(url: string, wanted: string | null, first: number, last: number): Promise<{ table: string; rows: number; ms: number }> {
  return withClient(url, async (c) => {
    const { table, columns } = await keyTable(c, wanted);
    const names: string[] = [];
    const values: string[] = [];
    for (const col of columns) {
      const fingerprint = col.type === 'bytea' ? `decode(md5(g::text), 'hex')` : `md5(g::text)`;
      const expr =
        col.name === 'fingerprint' ? fingerprint : (BY_NAME[col.name] ?? (!col.nullable && !col.hasDefault ? BY_TYPE[col.type] : undefined));
      if (expr === undefined) {
        if (!col.nullable && !col.hasDefault) throw new Error(`cannot seed ${table}.${col.name} of type ${col.type}`);
        continue;
      }
      names.push(`"${col.name}"`);
      values.push(expr);
    }
    const started = Date.now();
    await c.query(`SET statement_timeout = 0`);
    await c.query(
      `INSERT INTO "${table}" (${names.join(', ')}) SELECT ${values.join(', ')} FROM generate_series(${first}, ${last}) AS g`,
    );
    await c.query(`VACUUM ANALYZE "${table}"`);
    const count = await c.query<{ n: string }>(`SELECT count(*) AS n FROM "${table}"`);
    return { table, rows: Number(count.rows[0]?.n ?? 0), ms: Date.now() - started };
  });
}

/** p50/p99 of one durable single-row INSERT (autocommit) at 1 client: the floor under every commit the proxy makes. */
export async function commitLatency(url: string, n: number): Promise<{ p50: number; p99: number; n: number }> {
  return withClient(url, async (c) => {
    await c.query('CREATE TABLE IF NOT EXISTS bench_commit_probe (id integer)');
    const times: number[] = [];
    for (let i = 0; i < n; i += 1) {
      const t = performance.now();
      await c.query({ name: 'bench-probe', text: 'INSERT INTO bench_commit_probe (id) VALUES ($1)', values: [i] });
      times.push(performance.now() - t);
    }
    await c.query('DROP TABLE bench_commit_probe');
    times.sort((a, b) => a - b);
    const at = (q: number): number => Math.round(times[Math.min(times.length - 1, Math.floor(q * times.length))]! * 1000) / 1000;
    return { p50: at(0.5), p99: at(0.99), n };
  });
}
