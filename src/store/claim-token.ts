// The Idempotency-Claim token the proxy sends its upstream with a request
// that owns its key (docs/co-commit.md). It names the row and carries the
// claim's owner token:
//
//   v1.<base64url(tenant id)>.<base64url(key)>.<owner token>
//
// The owner token is a random (v4) UUID, fresh per claim, known only to the
// proxy and the upstream it sent the request to; idempotency_settle completes
// the row only while that token still owns it. Knowing a tenant and a key is
// therefore not enough to settle a row, and a token from an attempt whose
// lease was taken over settles nothing. No signature is needed: the secret
// part is the owner token itself, and the database checks it.

export const CLAIM_TOKEN_VERSION = 'v1';

/** The Idempotency-Claim header value for a claimed row. */
export function claimToken(tenantId: string, key: string, ownerToken: string): string {
  const tenant = tenantId === '' ? '' : Buffer.from(tenantId, 'utf8').toString('base64url');
  return `${CLAIM_TOKEN_VERSION}.${tenant}.${Buffer.from(key, 'utf8').toString('base64url')}.${ownerToken}`;
}
