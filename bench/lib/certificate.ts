// The run's TLS certificate, made at start-up in the run's temporary
// directory with the openssl CLI: one self-signed ECDSA P-256 certificate for
// 127.0.0.1 (the kind a modern PKI or ACME issues), used by the baseline over
// TLS, the baseline over HTTP/2 and the proxy alike, so the handshakes and
// record encryption they pay for are the same. The load generators do not
// verify it (wrk and h2load never do; load.ts tells undici and autocannon not to).
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

export interface BenchCertificate {
  readonly cert: string; // PEM file paths
  readonly key: string;
  readonly description: string;
}

export function makeCertificate(dir: string): BenchCertificate {
  const cert = join(dir, 'bench-tls.crt');
  const key = join(dir, 'bench-tls.key');
  try {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', cert,
      '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
    ], { stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const e = err as { code?: string; stderr?: Buffer };
    if (e.code === 'ENOENT') throw new Error('the TLS rows need the openssl command to make the run\'s certificate: apt-get install openssl');
    throw new Error(`openssl could not make the run's certificate: ${e.stderr?.toString().trim() ?? String(err)}`);
  }
  return { cert, key, description: 'self-signed ECDSA P-256 certificate for 127.0.0.1, made for the run' };
}
