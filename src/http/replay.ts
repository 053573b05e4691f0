import type { ServerResponse } from 'node:http';
import type { StoredResponse } from '../store/records.js';
import { PROBLEM_CONTENT_TYPE, Problems, problemBody } from './problems.js';

// Answers a duplicate with the stored record: status, stored headers (several
// lines of one name stay several), body byte for byte, Idempotent-Replayed.

/**
 * Headers that describe the original body and would be false for the small
 * problem body that replaces it (a digest that does not match, a download
 * file name for a JSON problem).
 */
const DESCRIBES_ORIGINAL_BODY: ReadonlySet<string> = new Set([
  'content-type', 'content-encoding', 'content-md5', 'etag', 'content-range', 'content-disposition',
  'digest', 'content-digest', 'repr-digest',
]);

export function sendReplay(res: ServerResponse, stored: StoredResponse, requestId: string): void {
  const flat: string[] = [];
  let body = stored.body;
  if (stored.bodyRetained) {
    for (const [name, value] of stored.headers) flat.push(name, value);
  } else {
    // The original body was over maxStoredResponseBytes: original status and
    // headers, with a small problem body in place of the original one.
    for (const [name, value] of stored.headers) {
      if (!DESCRIBES_ORIGINAL_BODY.has(name)) flat.push(name, value);
    }
    flat.push('content-type', PROBLEM_CONTENT_TYPE);
    body = Buffer.from(JSON.stringify(problemBody(
      Problems.bodyNotRetained,
      `the original response body (${stored.bodySize} bytes) was larger than this route's maxStoredResponseBytes and was not retained; the operation was not run again`,
      requestId,
      stored.status,
      { originalBodyBytes: stored.bodySize },
    )));
  }
  // RFC 9110 §8.6: no Content-Length in a 204 or 304 (nor a body).
  if (stored.status !== 204 && stored.status !== 304) flat.push('content-length', String(body.length));
  flat.push('idempotent-replayed', 'true', 'x-request-id', requestId);
  res.writeHead(stored.status, flat);
  res.end(body);
}
