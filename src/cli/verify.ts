import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CommandModule } from 'yargs';
import { parseDuration } from '../config/units.js';
import type { VerifyRequest } from '../ops/verify/fire.js';
import { CliError, type CliIo } from './io.js';
import type { Outcome } from './index.js';
import type { CommonArgs } from './options.js';

// `verify`: the concurrency test every deployment should run before trusting
// the proxy. N identical requests with one fresh key, at the same moment;
// exit 0 only if the upstream executed exactly one of them.

interface VerifyArgs extends CommonArgs {
  url?: string;
  concurrency: number;
  method: string;
  header?: string[];
  data?: string;
  'key-header': string;
  timeout: string;
  retries: number;
  'max-retry-wait': string;
  json: boolean;
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const MAX_CONCURRENCY = 1000;
const KEY_PLACEHOLDER = /\{\{key\}\}/g;

function checkUrl(value: string | undefined): string {
  if (value === undefined || value === '') throw new CliError('verify needs --url: the endpoint to test, e.g. --url http://127.0.0.1:8080/v1/payments');
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    throw new CliError(`--url ${JSON.stringify(value)} is not an absolute URL (expected e.g. http://127.0.0.1:8080/v1/payments)`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new CliError(`--url ${JSON.stringify(value)}: only http:// and https:// URLs are supported`);
  return u.toString();
}

function checkDuration(flag: string, value: string): number {
  // A bare number means seconds here (a command line is not a YAML file).
  const text = /^\d+$/.test(value.trim()) ? `${value.trim()}s` : value;
  let ms: number;
  try {
    ms = parseDuration(text);
  } catch {
    throw new CliError(`--${flag} ${JSON.stringify(value)} is not a duration (e.g. 500ms, 30s, 2m; a bare number means seconds)`);
  }
  if (ms <= 0) throw new CliError(`--${flag} must be longer than 0 (got ${JSON.stringify(value)})`);
  return ms;
}

function parseHeaders(list: readonly string[], key: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of list) {
    const i = h.indexOf(':');
    const name = i < 0 ? '' : h.slice(0, i).trim();
    if (i < 0 || !TOKEN.test(name)) throw new CliError(`--header ${JSON.stringify(h)}: expected "Name: value", e.g. --header 'Authorization: Bearer sk_test'`);
    out[name.toLowerCase()] = h.slice(i + 1).trim().replace(KEY_PLACEHOLDER, key);
  }
  return out;
}

function readData(data: string | undefined, key: string): Buffer | null {
  if (data === undefined) return null;
  let text = data;
  if (data.startsWith('@')) {
    const file = data.slice(1);
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new CliError(`--data @${file}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
  }
  return Buffer.from(text.replace(KEY_PLACEHOLDER, key));
}

function isJson(body: Buffer): boolean {
  try {
    JSON.parse(body.toString('utf8'));
    return true;
  } catch {
    return false;
  }
}

export function verifyCommand(io: CliIo, outcome: Outcome): CommandModule<CommonArgs, VerifyArgs> {
  return {
    command: 'verify',
    describe: 'Fire N identical requests with one fresh key at once and report how many the upstream executed (exit 0 only if exactly one)',
    builder: (y) => y
      .option('url', { type: 'string', describe: 'endpoint to test (through the proxy; or the bare upstream, to see the duplicates)' })
      .option('concurrency', { alias: 'n', type: 'number', default: 20, describe: `requests fired at the same moment (1-${MAX_CONCURRENCY})` })
      .option('method', { alias: 'X', type: 'string', default: 'POST', describe: 'HTTP method' })
      .option('header', { alias: 'H', type: 'string', array: true, describe: 'request header "Name: value" (repeatable)' })
      .option('data', { alias: 'd', type: 'string', describe: 'request body; @FILE reads a file; JSON bodies get content-type: application/json' })
      .option('key-header', { type: 'string', default: 'Idempotency-Key', describe: 'header that carries the fresh key' })
      .option('timeout', { type: 'string', default: '30s', describe: 'per-request timeout (e.g. 30s; a bare number is seconds)' })
      .option('retries', { type: 'number', default: 5, describe: 'retries of a 409 after its Retry-After, to see it replayed' })
      .option('max-retry-wait', { type: 'string', default: '10s', describe: 'upper bound for one wait, whatever Retry-After says' })
      .option('json', { type: 'boolean', default: false, describe: 'print the report as JSON' })
      .example("$0 verify --url http://127.0.0.1:8080/v1/payments -d '{\"amount\":100}'", '')
      .example("$0 verify --url http://127.0.0.1:8080/v1/orders -n 50 -H 'Authorization: Bearer sk_test' --json", '')
      .example("$0 verify --url http://127.0.0.1:8080/webhooks/psp -d '{\"id\":\"{{key}}\"}'", '')
      .epilogue([
        'Each request carries the same fresh key (a random UUID) and the same body, and all are sent at the same moment. Identical answers (status and body) count as one execution, different answers as several; a 409 is retried after its Retry-After and should then get the stored answer replayed. Several identical answers none of which is marked Idempotent-Replayed prove nothing: test an endpoint whose answer carries a unique id.',
        'For routes keyed by a body field or another header, {{key}} in --data or in a --header value is the fresh key.',
        'Exit codes: 0 exactly one execution; 1 more than one, or not provable; 2 usage or connection errors, or no upstream answer to compare.',
      ].join('\n\n')),
    handler: async (args) => {
      const url = checkUrl(args.url);
      const n = args.concurrency;
      if (!Number.isInteger(n) || n < 1 || n > MAX_CONCURRENCY) {
        throw new CliError(`--concurrency must be a whole number from 1 to ${MAX_CONCURRENCY} (got ${JSON.stringify(String(n))})`);
      }
      const method = args.method.toUpperCase();
      if (!TOKEN.test(method)) throw new CliError(`--method ${JSON.stringify(args.method)} is not an HTTP method`);
      const keyHeader = args['key-header'];
      if (!TOKEN.test(keyHeader)) throw new CliError(`--key-header ${JSON.stringify(keyHeader)} is not a header name`);
      if (!Number.isInteger(args.retries) || args.retries < 0) throw new CliError(`--retries must be a whole number >= 0 (got ${JSON.stringify(String(args.retries))})`);
      const timeoutMs = checkDuration('timeout', args.timeout);
      const maxWaitMs = checkDuration('max-retry-wait', args['max-retry-wait']);

      const key = randomUUID();
      const headers = parseHeaders(args.header ?? [], key);
      const body = readData(args.data, key);
      headers[keyHeader.toLowerCase()] = key;
      if (body !== null && headers['content-type'] === undefined && isJson(body)) headers['content-type'] = 'application/json';
      const req: VerifyRequest = { url, method, headers, body, timeoutMs };

      const [{ analyze }, { fireTogether }, { formatJson, formatText }] = await Promise.all([
        import('../ops/verify/analyze.js'), import('../ops/verify/fire.js'), import('../ops/verify/report.js'),
      ]);
      const exchanges = await fireTogether(req, n, { retries: args.retries, maxWaitMs });
      const analysis = analyze(exchanges);
      if (analysis.verdict === 'unreachable') {
        const f = exchanges[0]!.first;
        const why = f.kind === 'error' ? (f.code !== null && !f.message.includes(f.code) ? `${f.code} ${f.message}` : f.message) : 'no answer';
        throw new CliError(`cannot reach --url ${url}: ${why}`);
      }
      const head = { url, method, keyHeader, key, concurrency: n };
      io.stdout.write(args.json ? formatJson(head, analysis) : formatText(head, analysis));
      outcome.code = analysis.exitCode;
    },
  };
}
