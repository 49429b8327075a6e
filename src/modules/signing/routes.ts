import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { adminScope, changesBy } from '../../http/auth.js';
import { ErrorResponse } from '../../http/schemas.js';

const SigningKeySchema = Type.Object({
  keyId: Type.String(),
  algorithm: Type.Literal('ed25519'),
  publicKey: Type.String({ description: 'base64 of the raw 32-byte Ed25519 public key' }),
  createdAt: Type.String(),
  status: Type.Union([Type.Literal('active'), Type.Literal('retired')]),
  endorsement: Type.Union(
    [
      Type.Object({
        keyId: Type.String({ description: 'the key that endorsed this one (the previous active key)' }),
        signature: Type.String({ description: "base64 Ed25519 signature over this key's raw public key bytes" }),
      }),
      Type.Null(),
    ],
    { description: 'null for the first key' },
  ),
});

export function signingRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const { signer } = ctx;
  return async (app) => {
    app.get(
      '/api/signing-keys',
      {
        schema: {
          tags: ['launcher'],
          summary:
            'Keys that sign answers (RFC 9421 Signature over the RFC 9530 Content-Digest), newest first; retired keys sign during the overlap',
          response: { 200: Type.Array(SigningKeySchema) },
        },
      },
      async (_request, reply) => {
        reply.header('Cache-Control', 'no-cache');
        return signer.list();
      },
    );

    await app.register(
      adminScope(ctx.auth, async (admin) => {
        // Rotating the keys launchers pin is an owner's decision.
        admin.addHook('onRequest', changesBy());
        admin.post(
          '/api/admin/signing-keys/rotate',
          {
            schema: {
              tags: ['launcher (admin)'],
              summary: 'A new active signing key, endorsed by the previous one, which retires after the overlap',
              response: { 201: SigningKeySchema, 409: ErrorResponse },
            },
          },
          async (_request, reply) => reply.code(201).send(await signer.rotate()),
        );
      }),
    );
  };
}
