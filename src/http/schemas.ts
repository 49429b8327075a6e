import { Type } from 'typebox';

export const ErrorResponse = Type.Object({ error: Type.String() }, { description: 'every failure' });
export const OkResponse = Type.Object({ ok: Type.Literal(true) });
export const IdParams = Type.Object({ id: Type.String() });

/**
 * `string | null` as `{type: ["string", "null"]}`: the same contract as `Type.Union([…, Type.Null()])`,
 * but serialized directly by fast-json-stringify, where `anyOf` would validate every value at run time.
 */
export const NullableString = (
  options: { maxLength?: number; pattern?: string; format?: string; description?: string } = {},
) => Type.Unsafe<string | null>({ type: ['string', 'null'], ...options });

/** One of fixed strings as `{type: "string", enum: […]}`, serialized without the run-time checks of `anyOf`. */
export const StringEnum = <T extends string>(values: readonly T[], options: { description?: string } = {}) =>
  Type.Unsafe<T>({ type: 'string', enum: [...values], ...options });

/** `publishAt` in write bodies: an ISO 8601 timestamp or null (`"tomorrow"` is a 400 naming the field). */
export const PublishAtBody = Type.Unsafe<string | null>({
  type: ['string', 'null'],
  format: 'date-time',
  description: 'hidden from every public read and download until this time; null (default): published now',
});

/** `publishAt` as stored: ISO 8601 UTC, so that times compare as strings on both engines. */
export function publishAtColumn(value: string | null | undefined): string | null {
  return value === undefined || value === null ? null : new Date(value).toISOString();
}

/** The publisher's signature of the file, in answers only when there is one (additive). */
export function fileSignatureSchema() {
  return {
    fileSignature: Type.Optional(
      Type.String({ description: "the publisher's minisign signature of the file (.minisig text)" }),
    ),
    fileSignatureKeyId: Type.Optional(Type.String({ description: 'the id of the minisign key that signed the file' })),
  };
}

/** The `fileSignature` of create and update bodies. */
export const FileSignatureBody = NullableString({
  maxLength: 10_000,
  description: "the publisher's minisign signature of the file (.minisig text); null removes it",
});
