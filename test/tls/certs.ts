import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

// A private CA and certificates signed by it, made with the openssl CLI in a
// temporary directory: what an operator's PKI hands out, nothing faked.

export interface Pki {
  readonly dir: string;
  /** PEM of the CA certificate. */
  readonly ca: Buffer;
  readonly caFile: string;
  /** Issues a certificate (key in `<name>.key`, certificate in `<name>.crt`); returns the paths. */
  issue(name: string, subject: string, opts?: { san?: string; clientAuth?: boolean }): { cert: string; key: string };
  remove(): void;
}

function openssl(args: readonly string[], cwd: string): void {
  try {
    execFileSync('openssl', args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const e = err as { code?: string; stderr?: Buffer };
    if (e.code === 'ENOENT') throw new Error('the openssl command is needed to make test certificates: apt-get install openssl');
    throw new Error(`openssl ${args.join(' ')} failed: ${e.stderr?.toString() ?? String(err)}`);
  }
}

/** A new private CA (P-256 keys, valid one day). */
export function createPki(caSubject = '/CN=idempotency-proxy test CA'): Pki {
  const dir = mkdtempSync(path.join(tmpdir(), 'idem-pki-'));
  openssl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt',
    '-days', '1', '-subj', caSubject, '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'], dir);
  let serial = 1000;
  return {
    dir,
    caFile: path.join(dir, 'ca.crt'),
    ca: readFileSync(path.join(dir, 'ca.crt')),
    issue(name, subject, opts = {}) {
      openssl(['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', subject], dir);
      const ext = [
        'basicConstraints=CA:FALSE',
        `extendedKeyUsage=${opts.clientAuth === true ? 'clientAuth' : 'serverAuth'}`,
        ...(opts.san !== undefined ? [`subjectAltName=${opts.san}`] : []),
      ].join('\n');
      writeFileSync(path.join(dir, `${name}.ext`), `${ext}\n`);
      openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-set_serial', String(serial++),
        '-days', '1', '-extfile', `${name}.ext`, '-out', `${name}.crt`], dir);
      return { cert: path.join(dir, `${name}.crt`), key: path.join(dir, `${name}.key`) };
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
