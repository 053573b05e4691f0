import { createServer, connect, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export interface CuttingRelay {
  readonly url: string;
  /** Client connections accepted so far. */
  readonly connections: () => number;
  /** Responses dropped so far. */
  readonly cuts: () => number;
  close(): Promise<void>;
}

/**
 * A TCP relay between a client and `target` that loses answers: on each of the
 * first `cutConnections` client connections, as soon as the target sends its
 * first response bytes (so the target has executed the request), the relay
 * destroys the client's socket without forwarding them. The target's side is
 * kept open and drained, as when a reply is lost in the network: the target
 * believes it answered. Later connections are relayed untouched.
 */
export async function startCuttingRelay(target: string, cutConnections = 1): Promise<CuttingRelay> {
  const { hostname, port } = new URL(target);
  const sockets = new Set<Socket>();
  let connections = 0;
  let cuts = 0;
  const track = (s: Socket): void => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => undefined);
  };

  const server = createServer((client) => {
    const cutThis = connections < cutConnections;
    connections++;
    track(client);
    const upstream = connect(Number(port), hostname);
    track(upstream);
    let cut = false;
    client.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => {
      if (cut) return; // drain: the target thinks the client got it
      if (cutThis) {
        cut = true;
        cuts++;
        client.unpipe(upstream);
        client.destroy();
        return;
      }
      client.write(chunk);
    });
    upstream.on('end', () => {
      if (!cut) client.end();
    });
    client.on('close', () => {
      if (!cut) upstream.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port: relayPort } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${relayPort}`,
    connections: () => connections,
    cuts: () => cuts,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
