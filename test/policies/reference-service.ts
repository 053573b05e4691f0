import assert from 'node:assert/strict';
import type http from 'node:http';
import { REFERENCE_RECORD_HEADER, TRACE_RECORD_HEADER } from '../../src/proxy/headers.js';
import type { Reply } from '../helpers/http.js';
import type { Received } from '../helpers/upstream.js';
import { sleep } from '../helpers/wait.js';

// The order service the reference-record tests run behind the proxy (a real
// HTTP upstream, started by each test with startUpstream(svc.responder)), and
// what those tests share.

export const YAML = `
routes:
  - name: orders
    match: { path: "/orders/**" }
    record: reference
`;

export interface Order { id: number; state: string; version: number }

/** An order service: POST creates (201 + Location), PATCH changes, GET shows; `getMode` breaks the GET of one order. */
export function orderService() {
  const orders = new Map<number, Order>();
  const getMode = new Map<number, 'fail' | 'reset' | 'gone' | 'slow' | 'trickle' | 'break'>();
  let next = 1;
  const json = (res: http.ServerResponse, status: number, o: Order, extra: Record<string, string> = {}): void => {
    const body = JSON.stringify(o);
    res.writeHead(status, {
      'content-length': String(Buffer.byteLength(body)),
      'content-type': 'application/json', etag: `"v${o.version}"`, 'last-modified': new Date(1_700_000_000_000 + o.version * 1000).toUTCString(),
      'x-order-service': 'yes', ...extra,
    });
    res.end(body);
  };
  const responder = async (req: Received, _n: number, res: http.ServerResponse): Promise<void> => {
    const url = new URL(req.url, 'http://x');
    const id = Number(url.pathname.split('/')[2]);
    if (req.method === 'POST') {
      const o: Order = { id: next++, state: 'new', version: 1 };
      orders.set(o.id, o);
      const kind = url.searchParams.get('location');
      if (kind === 'none') return json(res, 201, o);
      if (kind === 'other-origin') return json(res, 201, o, { location: `http://127.0.0.1:1/orders/${o.id}` });
      if (kind === 'error') return json(res, 409, o, { location: `/orders/${o.id}` });
      if (kind === 'absolute') return json(res, 201, o, { location: `${origin}/orders/${o.id}?view=full` });
      return json(res, 201, o, { location: `/orders/${o.id}` });
    }
    const o = orders.get(id);
    if (o === undefined) {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('no such order');
      return;
    }
    if (req.method === 'PATCH') {
      Object.assign(o, JSON.parse(req.body.toString()) as Partial<Order>, { version: o.version + 1 });
      return json(res, 200, o);
    }
    const mode = getMode.get(id);
    if (mode === 'slow') await sleep(400);
    if (mode === 'break') {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
      res.write('{"id":');
      await sleep(50);
      res.socket?.destroy();
      return;
    }
    if (mode === 'trickle') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"id":');
      await sleep(400);
      res.end(`${o.id}}`);
      return;
    }
    if (mode === 'reset') return void res.socket?.destroy();
    if (mode === 'fail') {
      res.writeHead(503, { 'content-type': 'text/plain' });
      res.end('down for maintenance');
      return;
    }
    if (mode === 'gone') {
      res.writeHead(410, { 'content-type': 'text/plain' });
      res.end('deleted');
      return;
    }
    json(res, 200, o);
  };
  let origin = '';
  return { orders, getMode, responder, setOrigin: (o: string) => { origin = o; } };
}

export const AUTH = 'Bearer sk_test_reference';
export const headersFor = (key: string): Record<string, string> => ({ 'idempotency-key': key, authorization: AUTH, 'content-type': 'application/json' });

export function assertNoReserved(r: Reply): void {
  for (const name of Object.keys(r.headers)) {
    assert.ok(name !== REFERENCE_RECORD_HEADER && name !== TRACE_RECORD_HEADER, `reserved header ${name} reached the client`);
  }
}

