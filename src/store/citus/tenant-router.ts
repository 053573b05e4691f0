import type { Db, Queryable, Statement } from '../db/port.js';
import { isUnavailable } from '../db/pg-errors.js';
import { hashText } from './hash.js';

// On Citus, each tenant's statements go straight to the node that holds the
// tenant's shard (docs/scale.md, "Statements at the shard's node"). Through
// the coordinator a statement is planned there, sent on, and planned again;
// at the shard's node it runs where its row is, with no hop. Any node with
// Citus's metadata routes a statement to the right shard ("query from any
// node"), so a map that is out of date — a shard moved since the last
// refresh — costs a hop, never a row: the map is only where to knock first.
//
// The map (shard hash ranges and the node of each) is read from the
// coordinator's metadata at start and every refreshMs after. A node is used
// only once it answered a probe; one whose connection fails is left out
// (its tenants go through the coordinator) until a later refresh reaches it
// again. Migrations, the sweeper and the admin API stay on the coordinator:
// they take its advisory locks, or read every shard.

/** One shard of the key table: its hash range (inclusive) and the node its placement is on. */
export interface ShardPlacement {
  readonly shardId: number;
  readonly lo: number;
  readonly hi: number;
  /** host:port as Citus names the node; null: the coordinator itself. */
  readonly node: string | null;
}

const MAP: Statement = {
  name: '',
  text: `
SELECT DISTINCT ON (s.shardid) s.shardid::float8 AS shard_id, s.shardminvalue::int AS lo, s.shardmaxvalue::int AS hi,
       n.nodename AS host, n.nodeport AS port, n.groupid = 0 AS coordinator
  FROM pg_dist_shard s
  JOIN pg_dist_placement p ON p.shardid = s.shardid
  JOIN pg_dist_node n ON n.groupid = p.groupid
 WHERE s.logicalrelid = 'idempotency_keys'::regclass
   AND n.noderole = 'primary' AND n.isactive AND n.hasmetadata AND n.metadatasynced
 ORDER BY s.shardid, n.groupid`,
};

/** The server's own answer for the tenants the router checks its hash with. */
const SHARDS_OF: Statement = {
  name: '',
  text: `SELECT t, get_shard_id_for_distribution_column('idempotency_keys', t)::float8 AS shard_id FROM unnest($1::text[]) AS t`,
};

/** Tenants whose shards the router compares with the server's at every refresh (ASCII, multi-byte, long). */
const CHECKED = ['tenant-0', 'acct_1Nv0FGQ9RKHgCVdK', 'tenänt-ß-€', '租户', 'x'.repeat(40), ''];

const PROBE: Statement = { name: '', text: 'SELECT 1' };

export interface TenantRouterOptions {
  /** The coordinator: the map is read there, and every tenant without a usable node goes there. */
  readonly coordinator: Db;
  /** A pool to one node (same database, user and settings as the coordinator's). */
  readonly connect: (host: string, port: number) => Db;
  readonly refreshMs: number;
  readonly log: (level: 'info' | 'warn', fields: Record<string, unknown>, msg: string) => void;
}

interface Node {
  readonly db: Db;
  up: boolean;
  /** The node as a Queryable that takes itself out of the map when its connection fails. */
  readonly queryable: Queryable;
}

export class TenantRouter {
  private lo = new Int32Array(0);
  private hi = new Int32Array(0);
  private targets: Array<Node | null> = [];
  private readonly nodes = new Map<string, Node>();
  private timer: NodeJS.Timeout | null = null;
  private readonly scratch = Buffer.allocUnsafe(256);
  private closed = false;

  constructor(private readonly opts: TenantRouterOptions) {}

  /** Reads the map and probes its nodes; then refreshes every refreshMs in the background. */
  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => {
      this.refresh().catch((err: unknown) => this.opts.log('warn', { err: (err as Error).message }, 'citus: the shard map could not be refreshed; the last one stays'));
    }, this.opts.refreshMs);
    this.timer.unref();
  }

  /** Where a statement of `tenantId` goes: its shard's node when that node is up, else the coordinator. */
  forTenant(tenantId: string): Queryable {
    const lo = this.lo;
    if (lo.length === 0) return this.opts.coordinator;
    const h = hashText(tenantId, this.scratch);
    let a = 0;
    let b = lo.length - 1;
    while (a < b) {
      const m = (a + b + 1) >> 1;
      if (lo[m]! <= h) a = m;
      else b = m - 1;
    }
    const node = h <= this.hi[a]! ? this.targets[a] : null;
    return node != null && node.up ? node.queryable : this.opts.coordinator;
  }

  /** What the router knows, for the start-up log and the tests. */
  describe(): { shards: number; nodes: Record<string, 'up' | 'down'> } {
    const nodes: Record<string, 'up' | 'down'> = {};
    for (const [name, n] of this.nodes) nodes[name] = n.up ? 'up' : 'down';
    return { shards: this.lo.length, nodes };
  }

  async refresh(): Promise<void> {
    const rows = await this.opts.coordinator.query<{ shard_id: number; lo: number; hi: number; host: string; port: number; coordinator: boolean }>(MAP, []);
    const placements: ShardPlacement[] = rows
      .map((r) => ({ shardId: r.shard_id, lo: r.lo, hi: r.hi, node: r.coordinator ? null : `${r.host}:${r.port}` }))
      .sort((x, y) => x.lo - y.lo);
    if (!(await this.hashAgrees(placements))) {
      this.install([]);
      this.opts.log('warn', {}, "citus: this server's shard of a tenant is not the one the proxy computes (a server encoding other than UTF-8, or a collation that is not deterministic): every statement goes through the coordinator");
      return;
    }
    // Nodes of the new map: connected once, probed every refresh (a node that failed comes back here).
    const wanted = new Set(placements.map((p) => p.node).filter((n): n is string => n !== null));
    await Promise.all([...wanted].map(async (name) => {
      let node = this.nodes.get(name);
      if (node === undefined) {
        const [host, port] = splitNode(name);
        node = this.makeNode(name, this.opts.connect(host, port));
        this.nodes.set(name, node);
      }
      const was = node.up;
      try {
        await node.db.query(PROBE, []);
        node.up = true;
        if (!was) this.opts.log('info', { node: name }, 'citus: statements of the tenants on this node go to it directly');
      } catch (err) {
        this.down(name, node, err);
      }
    }));
    if (this.closed) return;
    this.install(placements);
    for (const [name, node] of this.nodes) {
      if (wanted.has(name)) continue;
      this.nodes.delete(name);
      await node.db.close().catch(() => undefined);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.install([]);
    const nodes = [...this.nodes.values()];
    this.nodes.clear();
    await Promise.all(nodes.map((n) => n.db.close().catch(() => undefined)));
  }

  private install(placements: readonly ShardPlacement[]): void {
    this.targets = placements.map((p) => (p.node === null ? null : this.nodes.get(p.node) ?? null));
    this.hi = Int32Array.from(placements.map((p) => p.hi));
    this.lo = Int32Array.from(placements.map((p) => p.lo));
  }

  private down(name: string, node: Node, err: unknown): void {
    node.up = false;
    this.opts.log('warn', { node: name, err: (err as Error).message }, 'citus: node not reachable from the proxy; its tenants go through the coordinator');
  }

  private makeNode(name: string, db: Db): Node {
    const node: Node = {
      db,
      up: false,
      queryable: {
        query: async <R>(stmt: Statement, values: readonly unknown[], ms?: number): Promise<R[]> => {
          try {
            return await db.query<R>(stmt, values, ms);
          } catch (err) {
            // The node cannot be reached: later statements go through the coordinator until a refresh reaches it.
            if (node.up && isUnavailable(err)) this.down(name, node, err);
            throw err;
          }
        },
      },
    };
    return node;
  }

  /** The shard the map gives each checked tenant is the one the server gives it. */
  private async hashAgrees(placements: readonly ShardPlacement[]): Promise<boolean> {
    if (placements.length === 0) return true;
    const rows = await this.opts.coordinator.query<{ t: string; shard_id: number }>(SHARDS_OF, [CHECKED]);
    return rows.every((r) => shardOf(placements, hashText(r.t)) === r.shard_id);
  }
}

function shardOf(placements: readonly ShardPlacement[], h: number): number | null {
  return placements.find((p) => p.lo <= h && h <= p.hi)?.shardId ?? null;
}

function splitNode(name: string): [string, number] {
  const at = name.lastIndexOf(':');
  return [name.slice(0, at), Number(name.slice(at + 1))];
}
