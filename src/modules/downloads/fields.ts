import { badRequest } from '../../http/errors.js';
import { canonicalHttpUrl } from '../../http/urls.js';
import type { FileService } from '../files/service.js';

/** What a software version and an addon release both store about where their download comes from. */
export interface DownloadColumns {
  downloadType: 'local' | 'url';
  externalUrl: string | null;
  filePath: string;
  fileSize: number;
  sha256: string | null;
}

export type DownloadFieldsBody = {
  downloadType?: 'local' | 'url' | undefined;
  externalUrl?: string | null | undefined;
  filePath?: string | undefined;
  fileSize?: number | undefined;
  sha256?: string | null | undefined;
};

/**
 * Validates the download fields of a create (`current` null) or update body and answers the
 * columns to write: `externalUrl` is an absolute http(s) URL and required for `url` downloads;
 * `filePath` names a file in the store, whose size and digest fill `fileSize`/`sha256` unless sent.
 * Switching an update from a stored file to a link forgets the file's size and digest (unless sent):
 * a launcher would otherwise check the linked file against another file's hash.
 */
export async function downloadFields(
  files: FileService,
  body: DownloadFieldsBody,
  current: Pick<DownloadColumns, 'downloadType' | 'externalUrl'> | null,
): Promise<Partial<DownloadColumns>> {
  const fields: Partial<DownloadColumns> = {};
  const downloadType = body.downloadType ?? current?.downloadType ?? 'local';
  if (body.externalUrl !== undefined) {
    // The schema's `http-url` format checked the link; it is stored in its normalised form.
    fields.externalUrl = body.externalUrl === null ? null : canonicalHttpUrl(body.externalUrl);
  }
  const externalUrl = fields.externalUrl !== undefined ? fields.externalUrl : (current?.externalUrl ?? null);
  if (downloadType === 'url' && !externalUrl)
    throw badRequest('body.externalUrl: is required when downloadType is url');
  if (body.downloadType !== undefined) fields.downloadType = body.downloadType;
  if (current !== null && current.downloadType === 'local' && downloadType === 'url') {
    fields.fileSize = 0;
    fields.sha256 = null;
  }
  if (body.filePath !== undefined && body.filePath !== '') {
    const facts = await files.facts(body.filePath, 'body.filePath');
    fields.filePath = facts.filePath;
    fields.fileSize = facts.size;
    fields.sha256 = facts.sha256;
  } else if (body.filePath === '') {
    fields.filePath = '';
  }
  if (body.fileSize !== undefined) fields.fileSize = body.fileSize;
  if (body.sha256 !== undefined) fields.sha256 = body.sha256?.toLowerCase() ?? null;
  return fields;
}
