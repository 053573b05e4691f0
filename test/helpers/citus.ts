import pg from 'pg';

// Under `npm run test:citus` (tools/test-citus.ts), TEST_DATABASE_URL is a
// Citus coordinator and TEST_CITUS_NODES lists every node's port, the
// coordinator's first. A database there is only a Citus database once it
// exists on every node with the extension, and the coordinator knows its
// workers: a template clone would not carry that, so each test database is
// made so and migrated (migrate distributes the tables).

export const citusNodes: readonly number[] | null = process.env.TEST_CITUS_NODES
  ? process.env.TEST_CITUS_NODES.split(',').map(Number)
  : null;

async function onNode(port: number, database: string, text: string, values: unknown[] = []): Promise<void> {
  const c = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', database });
  await c.connect();
  try {
    await c.query(text, values);
  } finally {
    await c.end();
  }
}

export async function createCitusDatabase(nodes: readonly number[], name: string): Promise<void> {
  for (const port of nodes) {
    await onNode(port, 'postgres', `CREATE DATABASE ${name}`);
    await onNode(port, name, 'CREATE EXTENSION citus');
  }
  const [coordinator, ...workers] = nodes as [number, ...number[]];
  await onNode(coordinator, name, 'SELECT citus_set_coordinator_host($1, $2)', ['127.0.0.1', coordinator]);
  for (const w of workers) await onNode(coordinator, name, 'SELECT citus_add_node($1, $2)', ['127.0.0.1', w]);
}

export async function dropCitusDatabase(nodes: readonly number[], name: string): Promise<void> {
  for (const port of nodes) await onNode(port, 'postgres', `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
}
