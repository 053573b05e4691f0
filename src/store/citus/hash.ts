// PostgreSQL's hash of a text value, as hashtext() computes it for a
// deterministic collation: hash_bytes (src/common/hashfn.c, Bob Jenkins'
// lookup3, unchanged since PostgreSQL 8.4) over the value's UTF-8 bytes, as
// a signed 32-bit integer. Citus places a row of a hash-distributed table on
// the shard whose [shardminvalue, shardmaxvalue] holds this hash of its
// distribution column. The proxy uses it only to pick the node it sends a
// tenant's statements to (src/store/citus/tenant-router.ts): any node routes
// a statement to the right shard, so a wrong hash would cost a hop, never a
// row. The router still checks it against the server's own at start-up.

const rot = (x: number, k: number): number => (x << k) | (x >>> (32 - k));

/** hashtext(value)::int4 for a UTF-8 server. */
export function hashText(value: string, scratch?: Buffer): number {
  const bytes = Buffer.byteLength(value);
  const k = scratch !== undefined && bytes <= scratch.length ? scratch : Buffer.allocUnsafe(bytes);
  const keylen = k.write(value, 0, 'utf8');
  let a = (0x9e3779b9 + keylen + 3923095) | 0;
  let b = a;
  let c = a;
  let i = 0;
  let len = keylen;
  while (len >= 12) {
    a = (a + (k[i]! | (k[i + 1]! << 8) | (k[i + 2]! << 16) | (k[i + 3]! << 24))) | 0;
    b = (b + (k[i + 4]! | (k[i + 5]! << 8) | (k[i + 6]! << 16) | (k[i + 7]! << 24))) | 0;
    c = (c + (k[i + 8]! | (k[i + 9]! << 8) | (k[i + 10]! << 16) | (k[i + 11]! << 24))) | 0;
    // mix(a, b, c)
    a = (a - c) | 0; a ^= rot(c, 4); c = (c + b) | 0;
    b = (b - a) | 0; b ^= rot(a, 6); a = (a + c) | 0;
    c = (c - b) | 0; c ^= rot(b, 8); b = (b + a) | 0;
    a = (a - c) | 0; a ^= rot(c, 16); c = (c + b) | 0;
    b = (b - a) | 0; b ^= rot(a, 19); a = (a + c) | 0;
    c = (c - b) | 0; c ^= rot(b, 4); b = (b + a) | 0;
    i += 12;
    len -= 12;
  }
  // The last 11 bytes (the lowest byte of c is left for the length, which is already in it).
  if (len >= 11) c = (c + (k[i + 10]! << 24)) | 0;
  if (len >= 10) c = (c + (k[i + 9]! << 16)) | 0;
  if (len >= 9) c = (c + (k[i + 8]! << 8)) | 0;
  if (len >= 8) b = (b + (k[i + 7]! << 24)) | 0;
  if (len >= 7) b = (b + (k[i + 6]! << 16)) | 0;
  if (len >= 6) b = (b + (k[i + 5]! << 8)) | 0;
  if (len >= 5) b = (b + k[i + 4]!) | 0;
  if (len >= 4) a = (a + (k[i + 3]! << 24)) | 0;
  if (len >= 3) a = (a + (k[i + 2]! << 16)) | 0;
  if (len >= 2) a = (a + (k[i + 1]! << 8)) | 0;
  if (len >= 1) a = (a + k[i]!) | 0;
  // final(a, b, c)
  c ^= b; c = (c - rot(b, 14)) | 0;
  a ^= c; a = (a - rot(c, 11)) | 0;
  b ^= a; b = (b - rot(a, 25)) | 0;
  c ^= b; c = (c - rot(b, 16)) | 0;
  a ^= c; a = (a - rot(c, 4)) | 0;
  b ^= a; b = (b - rot(a, 14)) | 0;
  c ^= b; c = (c - rot(b, 24)) | 0;
  return c | 0;
}
