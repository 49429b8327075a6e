import { createHash, type KeyObject } from 'node:crypto';
import { setImmediate } from 'node:timers/promises';
import { Point, utils } from '@noble/ed25519';

/*
 * Ed25519 (RFC 8032 §5.1.6) of a message held in parts, without joining them: Node's `sign` needs
 * the message in one buffer, which for a whole catalogue list means copying hundreds of MB for
 * every rendering (and once more for a sign job off the event loop). The two SHA-512 passes of the
 * algorithm run over the parts here, a few MB at a time between other requests; the curve
 * arithmetic is @noble/ed25519's. Ed25519 is deterministic, so the signature is exactly the one
 * `sign(null, Buffer.concat(parts), key)` makes (tested).
 */

const L = Point.CURVE().n;
/** Bytes hashed between two turns of the event loop. */
const RUN_BYTES = 4 * 1024 * 1024;

type Extended = Awaited<ReturnType<typeof utils.getExtendedPublicKeyAsync>>;
const extended = new WeakMap<KeyObject, Promise<Extended>>();

function extendedKey(key: KeyObject): Promise<Extended> {
  let found = extended.get(key);
  if (found === undefined) {
    const seed = Buffer.from(key.export({ format: 'jwk' }).d ?? '', 'base64url');
    found = utils.getExtendedPublicKeyAsync(seed);
    extended.set(key, found);
  }
  return found;
}

function littleEndian(bytes: Uint8Array): bigint {
  return BigInt(`0x${Buffer.from(bytes).reverse().toString('hex') || '0'}`);
}

function littleEndian32(n: bigint): Buffer {
  return Buffer.from(n.toString(16).padStart(64, '0'), 'hex').reverse();
}

/** SHA-512 of `head` followed by `parts`, yielding to the event loop every `RUN_BYTES`. */
async function sha512(head: readonly Uint8Array[], parts: readonly Buffer[]): Promise<Buffer> {
  const hash = createHash('sha512');
  for (const bytes of head) hash.update(bytes);
  let run = 0;
  for (const part of parts) {
    hash.update(part);
    run += part.length;
    if (run >= RUN_BYTES) {
      run = 0;
      await setImmediate();
    }
  }
  return hash.digest();
}

/** The Ed25519 signature of the concatenation of `parts` under `key` (an Ed25519 private key). */
export async function signParts(key: KeyObject, parts: readonly Buffer[]): Promise<Buffer> {
  const { prefix, scalar, pointBytes } = await extendedKey(key);
  const r = littleEndian(await sha512([prefix], parts)) % L;
  const R = Point.BASE.multiply(r).toBytes();
  const k = littleEndian(await sha512([R, pointBytes], parts)) % L;
  return Buffer.concat([R, littleEndian32((r + k * scalar) % L)]);
}
