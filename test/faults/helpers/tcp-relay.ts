import net from 'node:net';
import type { AddressInfo } from 'node:net';

// A TCP relay between the proxy and a real server that the test can slow
// down (delay every chunk), black-hole (accept, never forward) or cut.
// Used to make Redis "slow at the socket level", and PostgreSQL hang.

export interface TcpRelay {
  readonly port: number;
  /** Delay added to every chunk in both directions (0: none). */
  setDelay(ms: number): void;
  /** Swallow every byte (a peer that accepts and never answers). */
  setBlackhole(on: boolean): void;
  /** Connections from clients open right now. */
  readonly connections: number;
  /** Destroys every open connection. */
  cut(): void;
  close(): Promise<void>;
}

export async function startTcpRelay(targetPort: number): Promise<TcpRelay> {
  let delay = 0;
  let blackhole = false;
  const sockets = new Set<net.Socket>();
  const clients = new Set<net.Socket>();
  const pipe = (from: net.Socket, to: net.Socket): void => {
    from.on('data', (d: Buffer) => {
      if (blackhole) return;
      if (delay === 0) to.write(d);
      else setTimeout(() => { if (!to.destroyed) to.write(d); }, delay);
    });
  };
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, '127.0.0.1');
    clients.add(client);
    client.on('close', () => clients.delete(client));
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {});
    }
    pipe(client, upstream);
    pipe(upstream, client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as AddressInfo).port,
    get connections() { return clients.size; },
    setDelay: (ms) => { delay = ms; },
    setBlackhole: (on) => { blackhole = on; },
    cut: () => { for (const s of sockets) s.destroy(); },
    close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    }),
  };
}
