/**
 * RFC 9421 HTTP message signatures, the part a verifier needs: the signature candidates of a message
 * (`Signature-Input` with `Signature`), the §2.5 signature base from covered components, and Ed25519
 * verification with Node's crypto. Which components must be covered, and by which keys, is the
 * caller's policy (`verify.ts`).
 */
import { createPublicKey, verify } from 'node:crypto';
import { SignatureError } from '../errors.js';
import {
  isInnerList,
  type Parameters,
  parseDictionary,
  serializeInnerList,
  serializeItem,
  StructuredFieldError,
} from './structured-fields.js';

/** One member of `Signature-Input` with its `Signature` value. */
export interface SignatureCandidate {
  readonly label: string;
  /** The covered component identifiers as serialized, in order (`"content-digest"`, `"@path";req`, …). */
  readonly components: readonly string[];
  readonly params: Parameters;
  /** The serialized inner list: the value of `@signature-params` in the signature base. */
  readonly signatureParams: string;
  readonly signature: Buffer;
}

function parse(field: string, value: string) {
  try {
    return parseDictionary(value);
  } catch (err) {
    if (err instanceof StructuredFieldError) throw new SignatureError(`malformed ${field}: ${err.message}`);
    throw err;
  }
}

/** The candidates of a message; a missing or malformed header is a `SignatureError`. */
export function signatureCandidates(signatureInput: string | null, signature: string | null): SignatureCandidate[] {
  if (signatureInput === null || signature === null) {
    throw new SignatureError('the answer carries no Signature-Input and Signature');
  }
  const inputs = parse('Signature-Input', signatureInput);
  const values = parse('Signature', signature);
  const candidates: SignatureCandidate[] = [];
  for (const [label, input] of inputs) {
    const value = values.get(label);
    if (value === undefined) throw new SignatureError(`Signature has no member ${label}`);
    if (!isInnerList(input)) throw new SignatureError(`Signature-Input member ${label} is not an inner list`);
    if (isInnerList(value) || value.value.type !== 'bytes') {
      throw new SignatureError(`Signature member ${label} is not a byte sequence`);
    }
    const components = input.items.map((item) => {
      if (item.value.type !== 'string') {
        throw new SignatureError(`Signature-Input member ${label} covers an unsupported component`);
      }
      return serializeItem(item);
    });
    candidates.push({
      label,
      components,
      params: input.params,
      signatureParams: serializeInnerList(input),
      signature: value.value.value,
    });
  }
  return candidates;
}

/**
 * §2.5: one line per covered component, `<identifier>: <value>`, then the `@signature-params` line.
 * `valueOf` answers a component's value by its serialized identifier (a field's values joined by
 * ", ", or a derived component's); null when the message has none.
 */
export function signatureBase(
  components: readonly string[],
  valueOf: (component: string) => string | null,
  signatureParams: string,
): string {
  const lines = components.map((name) => {
    const value = valueOf(name);
    if (value === null) throw new SignatureError(`the signed component ${name} is absent`);
    if (/[\r\n]/.test(value)) throw new SignatureError(`the component ${name} holds a line break`);
    return `${name}: ${value.trim()}`;
  });
  lines.push(`"@signature-params": ${signatureParams}`);
  return lines.join('\n');
}

/** Ed25519 over `message` with a raw 32-byte public key. */
export function verifyEd25519(publicKey: Buffer, message: string | Buffer, signature: Buffer): boolean {
  if (publicKey.length !== 32 || signature.length !== 64) return false;
  const key = createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: publicKey.toString('base64url') },
    format: 'jwk',
  });
  return verify(null, typeof message === 'string' ? Buffer.from(message) : message, key, signature);
}

/** A string parameter's value (undefined when absent or of another type). */
export function stringParam(params: Parameters, key: string): string | undefined {
  const item = params.get(key);
  return item?.type === 'string' ? item.value : undefined;
}

/** An integer parameter's value (undefined when absent or of another type). */
export function integerParam(params: Parameters, key: string): number | undefined {
  const item = params.get(key);
  return item?.type === 'integer' ? item.value : undefined;
}
