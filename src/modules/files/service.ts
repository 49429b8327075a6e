import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import { recordAudit } from '../audit/log.js';
import type { Db } from '../../db/index.js';
import { nowIso } from '../../domain/clock.js';
import { badRequest } from '../../http/errors.js';
import { hashingCounter } from '../../storage/local.js';
import { filePathFromKey, keyFromFilePath, type Storage } from '../../storage/storage.js';
import { unnamedKeys } from './names.js';

export interface UploadedFile {
  filePath: string;
  originalName: string;
  size: number;
  sha256: string;
}

/** A stored file's upload record. */
export interface FileRecord extends UploadedFile {
  createdAt: string;
}

/** What a version or release records about the stored file its `filePath` names. */
export interface StoredFileFacts {
  filePath: string;
  size: number;
  sha256: string;
}

const IMAGE_TYPES: Readonly<Record<string, string>> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  avif: 'image/avif',
  ico: 'image/x-icon',
};

function extension(name: string): string {
  const match = /\.([A-Za-z0-9]{1,10})$/.exec(name);
  return match?.[1]?.toLowerCase() ?? '';
}

/** Images are shown inline with their type; anything else is an `application/octet-stream` attachment. */
export function servedType(name: string): { contentType: string; inline: boolean } {
  const image = IMAGE_TYPES[extension(name)];
  return image ? { contentType: image, inline: true } : { contentType: 'application/octet-stream', inline: false };
}

/** A store key that keeps a readable, ASCII-safe form of the original name after a unique part. */
export function keyForUpload(originalName: string, now = new Date(), unique: string = randomUUID()): string {
  const base = originalName.split(/[\\/]/).pop() ?? '';
  const safe = base
    .normalize('NFKD')
    .replace(/[^A-Za-z0-9._-]+/g, '_')
    .replace(/^[._]+/, '')
    .slice(-80);
  const month = now.toISOString().slice(0, 7);
  return `${month}/${unique}${safe === '' ? '' : `-${safe}`}`;
}

/** Original names kept in memory: a download would otherwise look its file's name up every time. */
const NAME_CACHE_SIZE = 10_000;

export class FileService {
  /** Key → original name (null: not uploaded through the API). Upload records never change. */
  private readonly names = new Map<string, string | null>();

  constructor(
    private readonly db: Db,
    private readonly storage: Storage,
    /** Told the size of every stored upload (metrics). */
    private readonly onUploaded?: (bytes: number) => void,
  ) {}

  /**
   * Streams `source` into the store under `key` (a fresh one by default) and records it. Storing the
   * same key again (a resumable upload finished by two instances at once) keeps the first record.
   */
  async upload(
    source: Readable,
    originalName: string,
    mimeType: string,
    key = keyForUpload(originalName),
  ): Promise<UploadedFile> {
    const written = await this.storage.write(key, source, servedType(originalName).contentType);
    await this.db.transaction().execute(async (trx) => {
      await trx
        .insertInto('files')
        .values({
          key,
          originalName,
          size: written.size,
          sha256: written.sha256,
          contentType: mimeType,
          createdAt: nowIso(),
        })
        .onConflict((oc) => oc.column('key').doNothing())
        .execute();
      await recordAudit(trx, { target: { type: 'files', id: filePathFromKey(key) } });
    });
    this.onUploaded?.(written.size);
    return { filePath: filePathFromKey(key), originalName, ...written };
  }

  /** Removes an object that was written but must not be kept (e.g. an upload over the size limit). */
  async discard(filePath: string): Promise<void> {
    const key = keyFromFilePath(filePath);
    if (key !== null) await this.discardKeys([key]);
  }

  /**
   * Removes stored objects (several at once) and their upload records (one statement): an object that
   * could not be deleted keeps its record, and the first such failure is thrown once the others are gone.
   */
  async discardKeys(keys: readonly string[]): Promise<void> {
    if (keys.length === 0) return;
    const failed = await this.storage.deleteMany(keys);
    const kept = new Set(failed.map((failure) => failure.key));
    const gone = keys.filter((key) => !kept.has(key));
    if (gone.length > 0) await this.db.deleteFrom('files').where('key', 'in', gone).execute();
    for (const key of gone) this.names.delete(key);
    if (failed[0] !== undefined) throw failed[0].error;
  }

  /**
   * Removes a stored upload that was refused (its signature), unless a version, release, image or
   * article names it: a file something names is never deleted.
   */
  async discardUnlessNamed(filePath: string): Promise<void> {
    const key = keyFromFilePath(filePath);
    if (key === null) return;
    await this.discardKeys(await unnamedKeys(this.db, [key]));
  }

  /** The upload record of a stored file whose key holds `unique` (a resumable upload's id). */
  async findByUnique(unique: string): Promise<FileRecord | null> {
    if (!/^[0-9a-f-]{36}$/.test(unique)) return null;
    const row = await this.db
      .selectFrom('files')
      .select(['key', 'originalName', 'size', 'sha256', 'createdAt'])
      .where('key', 'like', `%/${unique}%`)
      .executeTakeFirst();
    if (row === undefined) return null;
    const { key, ...rest } = row;
    return { filePath: filePathFromKey(key), ...rest };
  }

  /** The original name of an uploaded file, used for download file names. */
  async originalName(key: string): Promise<string | null> {
    const known = this.names.get(key);
    if (known !== undefined) return known;
    const row = await this.db.selectFrom('files').select('originalName').where('key', '=', key).executeTakeFirst();
    const name = row?.originalName ?? null;
    if (this.names.size >= NAME_CACHE_SIZE) this.names.clear();
    this.names.set(key, name);
    return name;
  }

  /**
   * Checks that `filePath` names a file in the store and returns its size and digest: from the
   * upload record when there is one, else by reading the object once. Anything else is a 400.
   */
  async facts(filePath: string, field: string): Promise<StoredFileFacts> {
    const key = keyFromFilePath(filePath);
    if (key === null) throw badRequest(`${field}: must name a file in the store (/uploads/…)`);
    const info = await this.storage.stat(key);
    if (info === null) throw badRequest(`${field}: no such file in the store: ${filePath}`);
    const row = await this.db.selectFrom('files').select(['size', 'sha256']).where('key', '=', key).executeTakeFirst();
    if (row && row.size === info.size) return { filePath, size: info.size, sha256: row.sha256 };
    const counter = hashingCounter();
    const stream = await this.storage.read(key);
    for await (const chunk of stream.pipe(counter)) void chunk;
    return { filePath, ...counter.digest() };
  }
}
