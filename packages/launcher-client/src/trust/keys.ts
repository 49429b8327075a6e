/**
 * The keys an app trusts: those it pins, and those adopted because a trusted key endorsed them (a
 * rotation: `GET /api/signing-keys` lists the new key with the previous key's Ed25519 signature over
 * its raw public key). Adopted keys are remembered in the state folder's `trusted-keys.json`.
 */
import type { paths } from '../api.js';
import { StateError } from '../errors.js';
import { verifyEd25519 } from './http-signature.js';
import type { StateFolder } from '../disk/state.js';

/** A key as the app pins it: `{keyId, publicKey}` of a `GET /api/signing-keys` entry. */
export interface TrustedKey {
  keyId: string;
  /** Base64 of the raw 32-byte Ed25519 public key. */
  publicKey: string;
}

/** An entry of `GET /api/signing-keys`. */
export type SigningKeyEntry =
  paths['/api/signing-keys']['get']['responses'][200]['content']['application/json'][number];

const ADOPTED_FILE = 'trusted-keys.json';

/** The raw 32 bytes of a key, or null when `publicKey` is not their canonical base64. */
function rawKey(key: TrustedKey): Buffer | null {
  const raw = Buffer.from(key.publicKey, 'base64');
  return raw.length === 32 && raw.toString('base64') === key.publicKey ? raw : null;
}

export class KeyRing {
  private readonly keys = new Map<string, Buffer>();
  private loaded: Promise<void> | null = null;

  constructor(
    pinned: readonly TrustedKey[],
    private readonly state: StateFolder,
  ) {
    for (const key of pinned) {
      const raw = rawKey(key);
      if (raw === null) throw new TypeError(`trustedKeys: ${key.keyId}'s publicKey is not the base64 of 32 bytes`);
      this.keys.set(key.keyId, raw);
    }
  }

  private load(): Promise<void> {
    this.loaded ??= this.state.readJson<TrustedKey[]>(ADOPTED_FILE, []).then((adopted) => {
      for (const key of adopted) {
        const raw = rawKey(key);
        if (raw === null)
          throw new StateError(`${ADOPTED_FILE}: ${key.keyId}'s publicKey is not the base64 of 32 bytes`);
        if (!this.keys.has(key.keyId)) this.keys.set(key.keyId, raw);
      }
    });
    return this.loaded;
  }

  /** The raw public key of a trusted key id. */
  async get(keyId: string): Promise<Buffer | undefined> {
    await this.load();
    return this.keys.get(keyId);
  }

  /**
   * Adopts every listed key endorsed by a trusted one (chains included: A endorses B endorses C),
   * remembers them, and answers the ids adopted. A key endorsed by no trusted key stays untrusted.
   */
  async adopt(listed: readonly SigningKeyEntry[]): Promise<string[]> {
    await this.load();
    const adopted: TrustedKey[] = [];
    for (let changed = true; changed;) {
      changed = false;
      for (const entry of listed) {
        if (this.keys.has(entry.keyId) || entry.endorsement === null || entry.algorithm !== 'ed25519') continue;
        const endorser = this.keys.get(entry.endorsement.keyId);
        if (endorser === undefined) continue;
        const key = { keyId: entry.keyId, publicKey: entry.publicKey };
        const raw = rawKey(key);
        if (raw === null || !verifyEd25519(endorser, raw, Buffer.from(entry.endorsement.signature, 'base64'))) continue;
        this.keys.set(entry.keyId, raw);
        adopted.push(key);
        changed = true;
      }
    }
    if (adopted.length > 0) {
      const kept = await this.state.readJson<TrustedKey[]>(ADOPTED_FILE, []);
      await this.state.writeJson(ADOPTED_FILE, [...kept, ...adopted]);
    }
    return adopted.map((k) => k.keyId);
  }
}
