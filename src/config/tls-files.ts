// TLS material named in the configuration (docs/configuration.md, Listener and
// Upstream): PEM files read and checked, each failure naming its field. The
// same readers run when the configuration is loaded (so `check-config` and a
// SIGHUP reject a missing or mismatched file) and when the listener or the
// upstream pool is built.

import { readFileSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import { createSecureContext } from 'node:tls';
import type { ListenTls, UpstreamTls } from './types.js';

/** A TLS file that cannot be used; `field` is the YAML path, e.g. `listen.tls.cert`. */
export class TlsFileError extends Error {
  constructor(readonly field: string, message: string) {
    super(`${field}: ${message}`);
    this.name = 'TlsFileError';
  }
}

function readPem(field: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : code === 'EISDIR' ? 'is a directory' : (err as Error).message;
    throw new TlsFileError(field, `cannot read ${JSON.stringify(file)} (${why})`);
  }
}

/** At least one certificate, and every block a certificate OpenSSL can parse. */
function checkCertificates(field: string, file: string, pem: Buffer): void {
  const blocks = pem.toString('latin1').match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g);
  if (blocks === null) throw new TlsFileError(field, `${JSON.stringify(file)} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`);
  for (const block of blocks) {
    try {
      new X509Certificate(block);
    } catch (err) {
      throw new TlsFileError(field, `${JSON.stringify(file)} holds a certificate that cannot be parsed (${(err as Error).message})`);
    }
  }
}

/** cert + key as a pair OpenSSL accepts (the key matches the certificate). */
function checkPair(base: string, cert: Buffer, key: Buffer): void {
  try {
    createSecureContext({ cert, key });
  } catch (err) {
    const message = (err as Error).message;
    // A mismatch, or a key OpenSSL cannot decode, is the key's fault; the certificate was parsed already.
    const field = /key|PEM|decoder|bad decrypt/i.test(message) ? `${base}.key` : `${base}.cert`;
    throw new TlsFileError(field, `the certificate and key cannot be used together (${message})`);
  }
}

/** The listener's secure-context options (SecureContextOptions), read from disk now (start-up and every SIGHUP). */
export function readListenTls(tls: ListenTls): { cert: Buffer; key: Buffer; ca?: Buffer } {
  const cert = readPem('listen.tls.cert', tls.cert);
  const key = readPem('listen.tls.key', tls.key);
  checkCertificates('listen.tls.cert', tls.cert, cert);
  checkPair('listen.tls', cert, key);
  if (tls.clientCa === null) return { cert, key };
  const ca = readPem('listen.tls.clientCa', tls.clientCa);
  checkCertificates('listen.tls.clientCa', tls.clientCa, ca);
  return { cert, key, ca };
}

/** The upstream connector's TLS options (undici `connect`), read from disk now. */
export function readUpstreamTls(tls: UpstreamTls): { ca?: Buffer; cert?: Buffer; key?: Buffer; servername?: string } {
  const out: { ca?: Buffer; cert?: Buffer; key?: Buffer; servername?: string } = {};
  if (tls.ca !== null) {
    out.ca = readPem('upstream.tls.ca', tls.ca);
    checkCertificates('upstream.tls.ca', tls.ca, out.ca);
  }
  if (tls.cert !== null && tls.key !== null) {
    out.cert = readPem('upstream.tls.cert', tls.cert);
    out.key = readPem('upstream.tls.key', tls.key);
    checkCertificates('upstream.tls.cert', tls.cert, out.cert);
    checkPair('upstream.tls', out.cert, out.key);
  }
  if (tls.servername !== null) out.servername = tls.servername;
  return out;
}
