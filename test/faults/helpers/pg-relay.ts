import net from 'node:net';
import type { AddressInfo } from 'node:net';

// A TCP relay in front of PostgreSQL that can lose exactly one reply: once
// armed, it forwards the next statement whose bytes name `statement` (a
// prepared statement's name appears in every Bind), lets the server run and
// commit it, then cuts the connection instead of delivering the answer. The
// client sees "Connection terminated" for a statement that took effect.

export interface PgRelay {
  readonly port: number;
  /** Loses the reply to the next execution of the named statement. */
  loseNextReply(statement: string): Promise<void>;
  /** How many writes of the clients so far name `statement`: one an execution (its first on a connection parses it in the same write). */
  sent(statement: string): number;
  close(): Promise<void>;
}

const READY_FOR_QUERY = Buffer.from([0x5a, 0, 0, 0, 5]); // 'Z', length 5: sent after the implicit commit

export async function startPgRelay(targetPort: number): Promise<PgRelay> {
  let armed: { name: Buffer; done: () => void } | null = null;
  const sockets = new Set<net.Socket>();
  const chunks: Buffer[] = [];
  const server = net.createServer((client) => {
    const pg = net.connect(targetPort, '127.0.0.1');
    let losing = false;
    for (const s of [client, pg]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {});
    }
    client.on('data', (d: Buffer) => {
      chunks.push(d);
      if (armed !== null && d.includes(armed.name)) {
        losing = true;
      }
      pg.write(d);
    });
    pg.on('data', (d: Buffer) => {
      if (!losing) {
        client.write(d);
        return;
      }
      if (d.includes(READY_FOR_QUERY)) {
        const a = armed;
        armed = null;
        client.destroy();
        pg.destroy();
        a?.done();
      }
    });
    client.on('close', () => pg.destroy());
    pg.on('close', () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as AddressInfo).port,
    loseNextReply: (statement) => new Promise<void>((resolve) => {
      armed = { name: Buffer.from(statement), done: resolve };
    }),
    sent: (statement) => {
      const name = Buffer.from(statement);
      return chunks.filter((d) => d.includes(name)).length;
    },
    close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    }),
  };
}
