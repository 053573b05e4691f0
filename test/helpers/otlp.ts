import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

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
}

export interface Receiver {
  url: string;
  spans: OtlpSpan[];
  /** "<method> <path> <content-type>" of every export received. */
  contentTypes: string[];
  /** The body's size in bytes of every export received, in the same order. */
  sizes: number[];
  close(): Promise<void>;
}

/** delayMs: each export is answered that much later (a slow collector). */
export async function startReceiver(opts: { delayMs?: number } = {}): Promise<Receiver> {
  const spans: OtlpSpan[] = [];
  const contentTypes: string[] = [];
  const sizes: number[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => setTimeout(() => {
      const type = req.headers['content-type'] ?? '';
      contentTypes.push(`${req.method} ${req.url} ${type}`);
      const body = Buffer.concat(chunks);
      sizes.push(body.length);
      if (type.startsWith('application/x-protobuf')) {
        spans.push(...decodeProtobufRequest(body));
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
        return;
      }
      const doc = JSON.parse(body.toString()) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: OtlpSpan[] }> }> };
      for (const rs of doc.resourceSpans) for (const ss of rs.scopeSpans) spans.push(...ss.spans);
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    }, opts.delayMs ?? 0));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, spans, contentTypes, sizes, close: () => new Promise((r) => server.close(() => r())) };
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
