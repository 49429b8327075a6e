import {
  checkSignature,
  MinisignFormatError,
  type MinisignPublicKey,
  parseSignature,
  prehash,
} from 'patchwell-client/minisign';
import type { AppContext } from '../../context.js';
import { badRequest } from '../../http/errors.js';
import { keyFromFilePath, type Storage } from '../../storage/storage.js';
import type { DownloadColumns } from './fields.js';

const FIELD = 'body.fileSignature';

/**
 * The `fileSignature` column a create or update body asks for: unchanged (undefined), none (null),
 * or the `.minisig` text once it reads as a minisign signature (400 naming `field` otherwise).
 */
export function fileSignatureColumn(given: string | null | undefined, field = FIELD): string | null | undefined {
  if (given === undefined || given === null) return given;
  try {
    parseSignature(given);
  } catch (error) {
    if (error instanceof MinisignFormatError) throw badRequest(`${field}: ${error.message}`);
    throw error;
  }
  return given;
}

/** What answers carry of a stored signature: nothing when there is none (additive fields). */
export function fileSignatureFields(stored: string | null): { fileSignature?: string; fileSignatureKeyId?: string } {
  if (stored === null) return {};
  try {
    return { fileSignature: stored, fileSignatureKeyId: parseSignature(stored).keyId };
  } catch (error) {
    // Written only once validated; a row copied from elsewhere still answers, without the key id.
    if (error instanceof MinisignFormatError) return { fileSignature: stored };
    throw error;
  }
}

/**
 * With `PUBLISHER_KEYS` set, a row with a stored file must carry a signature by one of those keys
 * over that file (streamed from the store) whose trusted comment is exactly `trustedComment`; 400
 * naming the field otherwise. Without the setting, or without a stored file, nothing is required.
 */
export async function requirePublisherSignature(
  ctx: AppContext,
  row: Pick<DownloadColumns, 'downloadType' | 'filePath'> & { fileSignature: string | null },
  trustedComment: string,
): Promise<void> {
  const keys = ctx.config.publisherKeys;
  if (keys === null || row.downloadType !== 'local' || row.filePath === '') return;
  const key = keyFromFilePath(row.filePath);
  if (key === null) throw badRequest(`body.filePath: must name a file in the store (/uploads/…)`);
  const refusal =
    row.fileSignature === null
      ? 'is required: the file must be signed by a publisher key (PUBLISHER_KEYS)'
      : await signatureRefusal(ctx.storage, keys, key, row.fileSignature, trustedComment);
  if (refusal === null) return;
  // Nothing refused stays: the upload goes at once, unless something already names it.
  await ctx.files.discardUnlessNamed(row.filePath);
  throw badRequest(`${FIELD}: ${refusal}`);
}

/** Why `signature` does not verify the stored file `key` under PUBLISHER_KEYS, or null when it does. */
async function signatureRefusal(
  storage: Storage,
  keys: readonly MinisignPublicKey[],
  key: string,
  signature: string,
  trustedComment: string,
): Promise<string | null> {
  const digest = await prehash(await storage.read(key));
  const verdict = checkSignature(parseSignature(signature), keys, digest, trustedComment);
  return verdict.ok ? null : verdict.reason;
}
