import { request } from 'undici';

// A plain HTTP client for tests: new connection per call is not needed;
// undici's global pool keeps it cheap. Returns everything a test asserts on.

export interface Reply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Buffer;
  text(): string;
  json(): any;
}

export async function send(
  url: string,
  opts: { method?: string; headers?: Record<string, string | string[]>; body?: string | Buffer } = {},
): Promise<Reply> {
  const r = await request(url, {
    method: (opts.method ?? 'POST') as 'POST',
    headers: opts.headers,
    body: opts.body,
  });
  const body = Buffer.from(await r.body.arrayBuffer());
  return {
    status: r.statusCode,
    headers: r.headers,
    body,
    text: () => body.toString(),
    json: () => JSON.parse(body.toString()),
  };
}

/** Fires all requests at the same moment and waits for every answer. */
export function together<T>(n: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  return Promise.all(Array.from({ length: n }, (_, i) => fn(i)));
}
