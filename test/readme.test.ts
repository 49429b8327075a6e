import { createPrivateKey, createPublicKey, sign } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { signatureBase, type SigningKey, verifiedInputs } from '../docs/examples/verify.js';
import { loadConfig } from '../src/config.js';
import { checkManifest } from '../src/domain/game-manifest.js';

const ROOT = path.resolve(import.meta.dirname, '..');

describe('deploy/nginx.conf', () => {
  it("closes idle connections to the instances before they close them (IDLE_TIMEOUT_MS's default)", () => {
    const conf = fs.readFileSync(path.join(ROOT, 'deploy/nginx.conf'), 'utf8');
    const upstream = /upstream launcher_service \{([^}]*)\}/.exec(conf)?.[1] ?? '';
    const nginxSeconds = Number(/keepalive_timeout (\d+)s;/.exec(upstream)?.[1] ?? 60);
    const serviceMs = loadConfig({ ADMIN_PASSWORD: 'an-admin-password' }).timeouts.idle;
    expect(nginxSeconds * 1000).toBeLessThanOrEqual(serviceMs - 5000);
  });
});

describe('README', () => {
  it('quotes docs/examples/verify.ts (the example the tests run) exactly', () => {
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const quoted = /<!-- docs\/examples\/verify\.ts -->\n```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(quoted).toBe(fs.readFileSync(path.join(ROOT, 'docs/examples/verify.ts'), 'utf8'));
  });
});

describe('docs/game-client.md', () => {
  const doc = fs.readFileSync(path.join(ROOT, 'docs/game-client.md'), 'utf8');
  /** The document from `<!-- example: name -->` on. */
  const example = (name: string) => doc.slice(doc.indexOf(`<!-- example: ${name} -->`));
  const manifest = /```json\n([\s\S]*?)```/.exec(example('a valid manifest'))?.[1] ?? '';

  it("its example manifest (the spec's: a listed file matching a remove pattern) passes the rules", () => {
    const checked = checkManifest(manifest);
    expect(checked.ok && checked.manifest.remove).toEqual(['Data/patch-*.mpq']);
  });

  it('each remove pattern of its table is valid or refused against that build, as the table says', () => {
    const rows = [...example('remove patterns').matchAll(/^\| `([^`]+)` +\| (valid|refused)\b/gm)];
    expect(rows.length).toBeGreaterThanOrEqual(10);
    for (const [, pattern, verdict] of rows) {
      const checked = checkManifest(JSON.stringify({ ...JSON.parse(manifest), remove: [pattern] }));
      expect(checked.ok ? 'valid' : checked.error, pattern).toSatisfy((answer: string) =>
        verdict === 'valid' ? answer === 'valid' : answer.startsWith(`remove[0]: "${pattern}" `),
      );
    }
  });
});

/*
 * RFC 9421, Appendix B.1.4 (the Ed25519 test key), B.2 (the test request) and B.2.6 (signing it
 * with ed25519), as the RFC prints them (its long lines joined, RFC 8792 line wrapping undone).
 * docs/examples/verify.ts checks our answers (every signed-answer test) with the same
 * `signatureBase` and `verifiedInputs` that check the RFC's own example here.
 */
const RFC_PUBLIC_KEY = `-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=
-----END PUBLIC KEY-----`;
const RFC_PRIVATE_KEY = `-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF
-----END PRIVATE KEY-----`;
/** B.2's test request: POST /foo?param=Value&Pet=dog to example.com. */
const RFC_REQUEST = {
  method: 'POST',
  path: '/foo',
  authority: 'example.com',
  headers: {
    Host: 'example.com',
    Date: 'Tue, 20 Apr 2021 02:07:55 GMT',
    'Content-Type': 'application/json',
    'Content-Digest':
      'sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:',
    'Content-Length': '18',
  },
  body: '{"hello": "world"}',
};
const RFC_SIGNATURE_INPUT =
  'sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"';
const RFC_SIGNATURE =
  'sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:';
const RFC_SIGNATURE_BASE = [
  '"date": Tue, 20 Apr 2021 02:07:55 GMT',
  '"@method": POST',
  '"@path": /foo',
  '"@authority": example.com',
  '"content-type": application/json',
  '"content-length": 18',
  '"@signature-params": ("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"',
].join('\n');

describe('docs/examples/verify.ts against RFC 9421 Appendix B.2.6', () => {
  const rfcKey: SigningKey = {
    keyId: 'test-key-ed25519',
    publicKey: Buffer.from(createPublicKey(RFC_PUBLIC_KEY).export({ format: 'jwk' }).x ?? '', 'base64url').toString(
      'base64',
    ),
    endorsement: null,
  };
  const headers = new Headers({
    ...RFC_REQUEST.headers,
    'Signature-Input': RFC_SIGNATURE_INPUT,
    Signature: RFC_SIGNATURE,
  });
  /** The request's components (by identifier, `"@path"`): derived ones from the request line, fields from its headers. */
  const componentOf = (identifier: string): string => {
    const name = identifier.slice(1, -1);
    return (
      { '@method': RFC_REQUEST.method, '@path': RFC_REQUEST.path, '@authority': RFC_REQUEST.authority }[name] ??
      headers.get(name) ??
      ''
    );
  };
  const input = RFC_SIGNATURE_INPUT.slice('sig-b26='.length);

  it('builds the signature base the RFC prints', () => {
    expect(signatureBase(input, componentOf)).toBe(RFC_SIGNATURE_BASE);
    expect(RFC_REQUEST.body).toHaveLength(Number(RFC_REQUEST.headers['Content-Length']));
  });

  it("verifies the RFC's signature with the RFC's key, and nothing else", () => {
    expect(verifiedInputs(headers, componentOf, [rfcKey])).toEqual([input]);
    // Ed25519 is deterministic: the RFC's private key makes exactly the printed signature.
    const made = sign(null, Buffer.from(RFC_SIGNATURE_BASE), createPrivateKey(RFC_PRIVATE_KEY)).toString('base64');
    expect(`sig-b26=:${made}:`).toBe(RFC_SIGNATURE);
    // A changed component, another key, or a changed signature is refused.
    const changed = (identifier: string) => (identifier === '"@path"' ? '/bar' : componentOf(identifier));
    expect(verifiedInputs(headers, changed, [rfcKey])).toEqual([]);
    const other = { ...rfcKey, publicKey: Buffer.alloc(32, 7).toString('base64') };
    expect(verifiedInputs(headers, componentOf, [other])).toEqual([]);
    const forged = new Headers(headers);
    forged.set('signature', RFC_SIGNATURE.replace('wqcA', 'wqcB'));
    expect(verifiedInputs(forged, componentOf, [rfcKey])).toEqual([]);
  });
});
