import { once } from 'node:events';
import http, { type IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';

// An OTLP/HTTP trace receiver for tests: what the proxy's real exporter sends
// to /v1/traces is decoded, OTLP/JSON or OTLP/protobuf (a decoder of the
// fields tests read, written from the OTLP trace .proto), into one shape.

export interface OtlpAttribute { key: string; value: Record<string, unknown> }
export interface OtlpSpan {
  traceId: string; spanId: string; parentSpanId?: string; name: string; kind: number;
  startTimeUnixNano: string | number; endTimeUnixNano: string | number;
  attributes?: OtlpAttribute[];
  links?: Array<{ traceId: string; spanId: string }>;
  events?: Array<{ name: string; attributes?: OtlpAttribute[] }>;
  /** code 2: error, with its message. */
  status?: { code?: number; message?: string };
}

export interface Receiver {
  url: string;
  spans: OtlpSpan[];
  /** "<method> <path> <content-type>" of every export received. */
  contentTypes: string[];
  /** The body's size in bytes of every export received, in the same order (as sent: compressed when it was). */
  sizes: number[];
  /** The request headers of every export received, in the same order (answered with an error or not). */
  headers: IncomingHttpHeaders[];
  close(): Promise<void>;
}

/** How the receiver answers one export instead of taking its spans (a collector that refuses or is overloaded). */
export interface ScriptedAnswer {
  readonly status: number;
  readonly headers?: Record<string, string>;
  readonly body?: string;
}

export interface ReceiverOptions {
  /** Each export is answered that much later (a slow collector). */
  readonly delayMs?: number;
  /** The first exports are answered with these, in order, and their spans not kept; the rest are taken. */
  readonly answers?: readonly ScriptedAnswer[];
  /** Listen with TLS (https://127.0.0.1:<port>: the certificate needs IP:127.0.0.1 among its names). */
  readonly tls?: { readonly key: Buffer; readonly cert: Buffer; readonly ca?: Buffer; readonly requestCert?: boolean };
}

export async function startReceiver(opts: ReceiverOptions = {}): Promise<Receiver> {
  const spans: OtlpSpan[] = [];
  const contentTypes: string[] = [];
  const sizes: number[] = [];
  const headers: IncomingHttpHeaders[] = [];
  const script = [...(opts.answers ?? [])];
  const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => setTimeout(() => {
      const type = req.headers['content-type'] ?? '';
      contentTypes.push(`${req.method} ${req.url} ${type}`);
      headers.push(req.headers);
      const sent = Buffer.concat(chunks);
      sizes.push(sent.length);
      const scripted = script.shift();
      if (scripted !== undefined) {
        res.writeHead(scripted.status, scripted.headers ?? {}).end(scripted.body ?? '');
        return;
      }
      const body = req.headers['content-encoding'] === 'gzip' ? gunzipSync(sent) : sent;
      if (type.startsWith('application/x-protobuf')) {
        spans.push(...decodeProtobufRequest(body));
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
        return;
      }
      const doc = JSON.parse(body.toString()) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: OtlpSpan[] }> }> };
      for (const rs of doc.resourceSpans) for (const ss of rs.scopeSpans) spans.push(...ss.spans);
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    }, opts.delayMs ?? 0));
  };
  const server = opts.tls === undefined ? http.createServer(handler) : https.createServer({ ...opts.tls }, handler);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const url = `${opts.tls === undefined ? 'http' : 'https'}://127.0.0.1:${port}`;
  return {
    url, spans, contentTypes, sizes, headers,
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

/** The value of a span attribute (string, bool, int as a string or number, double), or undefined. */
export function attr(s: { attributes?: OtlpAttribute[] }, key: string): unknown {
  const v = s.attributes?.find((a) => a.key === key)?.value;
  return v === undefined ? undefined : Object.values(v)[0];
}

export const durationNs = (s: OtlpSpan): bigint => BigInt(s.endTimeUnixNano) - BigInt(s.startTimeUnixNano);

// --- OTLP/protobuf: ExportTraceServiceRequest → ResourceSpans(2: scope_spans) → ScopeSpans(2: spans) → Span

export type Field = { no: number; wire: number; int: bigint; bytes: Buffer };

export function* fields(buf: Buffer): Generator<Field> {
  let pos = 0;
  const varint = (): bigint => {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[pos++]!;
      v |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return v;
      shift += 7n;
    }
  };
  while (pos < buf.length) {
    const tag = Number(varint());
    const no = tag >>> 3;
    const wire = tag & 7;
    if (wire === 0) yield { no, wire, int: varint(), bytes: Buffer.alloc(0) };
    else if (wire === 1) { yield { no, wire, int: buf.readBigUInt64LE(pos), bytes: buf.subarray(pos, pos + 8) }; pos += 8; }
    else if (wire === 5) { yield { no, wire, int: BigInt(buf.readUInt32LE(pos)), bytes: buf.subarray(pos, pos + 4) }; pos += 4; }
    else if (wire === 2) {
      const len = Number(varint());
      yield { no, wire, int: 0n, bytes: buf.subarray(pos, pos + len) };
      pos += len;
    } else throw new Error(`OTLP protobuf: unexpected wire type ${wire} (field ${no})`);
  }
}

function decodeProtobufRequest(body: Buffer): OtlpSpan[] {
  const out: OtlpSpan[] = [];
  for (const rs of fields(body)) {
    if (rs.no !== 1) continue;
    for (const ss of fields(rs.bytes)) {
      if (ss.no !== 2) continue;
      for (const sp of fields(ss.bytes)) if (sp.no === 2) out.push(decodeSpan(sp.bytes));
    }
  }
  return out;
}

function decodeSpan(buf: Buffer): OtlpSpan {
  const span: OtlpSpan = { traceId: '', spanId: '', name: '', kind: 0, startTimeUnixNano: '0', endTimeUnixNano: '0', attributes: [], links: [], events: [] };
  for (const f of fields(buf)) {
    switch (f.no) {
      case 1: span.traceId = f.bytes.toString('hex'); break;
      case 2: span.spanId = f.bytes.toString('hex'); break;
      case 4: if (f.bytes.length > 0) span.parentSpanId = f.bytes.toString('hex'); break;
      case 5: span.name = f.bytes.toString('utf8'); break;
      case 6: span.kind = Number(f.int); break;
      case 7: span.startTimeUnixNano = f.int.toString(); break;
      case 8: span.endTimeUnixNano = f.int.toString(); break;
      case 9: span.attributes!.push(decodeKeyValue(f.bytes)); break;
      case 11: {
        const ev: { name: string; attributes: OtlpAttribute[] } = { name: '', attributes: [] };
        for (const e of fields(f.bytes)) {
          if (e.no === 2) ev.name = e.bytes.toString('utf8');
          else if (e.no === 3) ev.attributes.push(decodeKeyValue(e.bytes));
        }
        span.events!.push(ev);
        break;
      }
      case 13: {
        const link = { traceId: '', spanId: '' };
        for (const l of fields(f.bytes)) {
          if (l.no === 1) link.traceId = l.bytes.toString('hex');
          else if (l.no === 2) link.spanId = l.bytes.toString('hex');
        }
        span.links!.push(link);
        break;
      }
      case 15: {
        // Status: message 2, code 3.
        const status: { code?: number; message?: string } = {};
        for (const st of fields(f.bytes)) {
          if (st.no === 2) status.message = st.bytes.toString('utf8');
          else if (st.no === 3) status.code = Number(st.int);
        }
        span.status = status;
        break;
      }
      default:
    }
  }
  return span;
}

function decodeKeyValue(buf: Buffer): OtlpAttribute {
  let key = '';
  let value: Record<string, unknown> = {};
  for (const f of fields(buf)) {
    if (f.no === 1) key = f.bytes.toString('utf8');
    else if (f.no === 2) {
      for (const v of fields(f.bytes)) {
        if (v.no === 1) value = { stringValue: v.bytes.toString('utf8') };
        else if (v.no === 2) value = { boolValue: v.int !== 0n };
        else if (v.no === 3) value = { intValue: BigInt.asIntN(64, v.int).toString() };
        else if (v.no === 4) value = { doubleValue: v.bytes.readDoubleLE(0) };
      }
    }
  }
  return { key, value };
}
