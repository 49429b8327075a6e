import type { DeleteObjectsCommandInput } from '@aws-sdk/client-s3';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { versionTrustedComment } from 'patchwell-client/minisign';
import { generateKeyPair, parseSecretKey, signFile } from 'patchwell-publish/minisign';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../src/config.js';
import { LocalStorage } from '../src/storage/local.js';
import { S3Storage } from '../src/storage/s3.js';
import { keyFromFilePath, type Storage } from '../src/storage/storage.js';
import {
  admin,
  buildSecondApp,
  buildTestApp,
  createPackage,
  createVersion,
  type TestApp,
  upload,
} from './helpers/app.js';
import { S3RVER_CREDENTIALS, startS3, type TestS3 } from './helpers/s3.js';

/**
 * Issue 38, nothing refused stays: an upload refused for its publisher signature is deleted at once
 * (unless something names it), and a sweep deletes stored files nothing names once older than
 * UPLOAD_EXPIRY_HOURS; on the local folder and on S3, on both engines.
 */

const HOUR = 3600_000;
const EXPIRY_HOURS = 24;
/** A moment after every file stored now is older than the expiry. */
const later = () => Date.now() + (EXPIRY_HOURS + 1) * HOUR;

let s3: TestS3;
let keysDir: string;
beforeAll(async () => {
  s3 = await startS3();
  keysDir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-sweep-'));
});
afterAll(async () => {
  await s3.close();
  fs.rmSync(keysDir, { recursive: true, force: true });
});

const stores: [string, (dir: string) => Storage][] = [
  ['local folder', (dir) => new LocalStorage(path.join(dir, 'uploads'))],
  [
    'S3',
    (dir) => {
      const storage = loadConfig({ DATA_DIR: dir, ...s3.env(`sweep-${path.basename(dir)}`) }).storage;
      if (storage.kind !== 's3') throw new Error('expected S3 storage');
      return new S3Storage(storage, { credentials: S3RVER_CREDENTIALS });
    },
  ],
];

describe.each(stores)('stored uploads on the %s store', (_name, open) => {
  let t: TestApp;
  let storage: Storage;
  let publisher: Awaited<ReturnType<typeof parseSecretKey>>;

  beforeEach(async () => {
    const pair = await generateKeyPair('');
    publisher = await parseSecretKey(pair.secretKeyFile, '');
    const keysFile = path.join(keysDir, `publishers-${publisher.keyId}`);
    fs.writeFileSync(keysFile, pair.publicKeyFile);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-sweep-store-'));
    storage = open(dir);
    t = await buildTestApp({ PUBLISHER_KEYS: keysFile, UPLOAD_EXPIRY_HOURS: String(EXPIRY_HOURS) }, { storage });
    return async () => {
      await t.close();
      await storage.close?.();
      fs.rmSync(dir, { recursive: true, force: true });
    };
  });

  const stored = async (filePath: string) => (await storage.stat(keyFromFilePath(filePath) ?? '')) !== null;
  const metric = async (name: string) => {
    const res = await t.inject({ method: 'GET', url: '/metrics' });
    return Number(new RegExp(`^${name} (\\d+)`, 'm').exec(res.body)?.[1] ?? NaN);
  };

  it('sweeps an unnamed file once older than UPLOAD_EXPIRY_HOURS, keeps it while young; counted in /metrics', async () => {
    const orphan = await upload(t, 'orphan.zip', 'nobody names me');
    expect(await t.app.ctx.uploadSweep.run()).toEqual({ examined: 1, swept: 0 });
    expect(await stored(orphan.filePath)).toBe(true);
    // One instance at a time: another one finds the lease held (it lasts minutes after a sweep).
    const second = await buildSecondApp(t);
    expect(await second.ctx.uploadSweep.run()).toBeNull();
    await second.close();
    expect(await stored(orphan.filePath)).toBe(true);
    expect(await t.app.ctx.uploadSweep.run(later())).toEqual({ examined: 1, swept: 1 });
    expect(await stored(orphan.filePath)).toBe(false);
    // Its upload record went with it.
    const records = await t.app.ctx.db.selectFrom('files').select('key').execute();
    expect(records).toEqual([]);
    expect(await metric('stored_uploads_examined_total')).toBe(2);
    expect(await metric('stored_uploads_swept_total')).toBe(1);
  });

  it('never sweeps a file something names: version, release, delta, icon, screenshot, article (cover and text), banner (also as an absolute URL or with a query), gallery', async () => {
    const db = t.app.ctx.db;
    const at = new Date().toISOString();
    const file = (name: string) => upload(t, name, `bytes of ${name}`);
    const pkg = await createPackage(t, { slug: 'kept', name: '启动器' });
    const versionFile = await file('launcher.zip');
    const sha = versionFile.sha256;
    const signature = await signVersion(versionFile, 'kept', 1, sha);
    const version = await createVersion(t, pkg.id, {
      version: '1',
      versionCode: 1,
      filePath: versionFile.filePath,
      fileSignature: signature,
    });
    const names = {
      release: await file('addon.zip'),
      delta: await file('delta.zst'),
      icon: await file('icon.png'),
      screenshot: await file('shot.png'),
      cover: await file('cover.png'),
      inArticle: await file('inline.png'),
      absolute: await file('absolute.png'),
      absoluteLink: await file('absolute-banner.png'),
      linkWithQuery: await file('query-banner.png'),
      banner: await file('banner.png'),
      gallery: await file('gallery.png'),
    };
    const base = { createdAt: at, updatedAt: at };
    await db
      .insertInto('addons')
      .values({
        id: 'a1',
        slug: 'addon',
        nameZh: '插件',
        nameEn: 'Addon',
        summaryZh: '',
        summaryEn: '',
        descriptionZh: '',
        descriptionEn: `see https://cdn.example.com${names.absolute.filePath}`,
        iconUrl: names.icon.filePath,
        category: 'misc',
        published: 1,
        ...base,
      })
      .execute();
    await db
      .insertInto('releases')
      .values({
        id: 'r1',
        addonId: 'a1',
        version: '1',
        changelogZh: '',
        changelogEn: '',
        downloadType: 'local',
        filePath: names.release.filePath,
        externalUrl: null,
        fileSize: names.release.size,
        sha256: names.release.sha256,
        gameVersion: '',
        isLatest: 1,
        wowVersion: 'retail',
        createdAt: at,
      })
      .execute();
    await db
      .insertInto('screenshots')
      .values({ id: 's1', addonId: 'a1', imageUrl: names.screenshot.filePath, sortOrder: 0, createdAt: at })
      .execute();
    await db
      .insertInto('articles')
      .values({
        id: 'p1',
        slug: 'news',
        titleZh: '新闻',
        titleEn: 'News',
        summaryZh: '',
        summaryEn: '',
        contentZh: `![图](${names.inArticle.filePath})`,
        contentEn: '',
        coverImage: names.cover.filePath,
        published: 1,
        ...base,
      })
      .execute();
    await db
      .insertInto('banners')
      .values([
        { id: 'b1', imageUrl: names.banner.filePath, sortOrder: 0, enabled: 1, createdAt: at },
        {
          id: 'b2',
          imageUrl: `https://dl.example.com${names.absoluteLink.filePath}`,
          sortOrder: 1,
          enabled: 1,
          createdAt: at,
        },
        { id: 'b3', imageUrl: `${names.linkWithQuery.filePath}?v=2`, sortOrder: 2, enabled: 1, createdAt: at },
      ])
      .execute();
    await db
      .insertInto('galleryImages')
      .values({
        id: 'g1',
        imageUrl: names.gallery.filePath,
        titleZh: '',
        titleEn: '',
        sortOrder: 0,
        enabled: 1,
        createdAt: at,
      })
      .execute();
    await db
      .insertInto('softwareDeltas')
      .values({
        id: 'd1',
        sourceVersionId: version.id,
        targetVersionId: version.id,
        sourceSha256: sha,
        targetSha256: sha,
        status: 'ready',
        nextAttemptMs: 0,
        fileKey: keyFromFilePath(names.delta.filePath),
        fileSize: names.delta.size,
        sha256: names.delta.sha256,
        error: null,
        ...base,
      })
      .execute();
    const orphan = await file('orphan.zip');

    expect(await t.app.ctx.uploadSweep.run(later())).toEqual({ examined: 13, swept: 1 });
    expect(await stored(orphan.filePath)).toBe(false);
    for (const [kind, named] of Object.entries({ version: versionFile, ...names })) {
      expect(await stored(named.filePath), kind).toBe(true);
    }
  });

  it('leaves game chunks (game-chunks/) to the game module; a text naming several files keeps each, and only those (exactly as written)', async () => {
    const put = (key: string) => storage.write(key, Readable.from([`bytes of ${key}`]), 'application/octet-stream');
    const chunk = 'game-chunks/ab/ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34';
    const keys = {
      first: '2026-01/pic.png',
      second: '2026-01/pic2.png',
      afterNewline: '2026-02/other.png',
      unnamed: '2026-01/pic3.png',
    };
    for (const key of [chunk, ...Object.values(keys)]) await put(key);
    const at = new Date().toISOString();
    await t.app.ctx.db
      .insertInto('softwarePackages')
      .values({
        id: 'p1',
        slug: 'texts',
        nameZh: 'Texts',
        nameEn: 'Texts',
        descriptionZh: `![a](/uploads/${keys.first}) ![b](/uploads/${keys.second})\n/uploads/${keys.afterNewline}`,
        // Another case, or the key's start alone, names something else.
        descriptionEn: `/UPLOADS/${keys.unnamed} /uploads/2026-01/pic3`,
        createdAt: at,
        updatedAt: at,
      })
      .execute();

    // The chunk is older than the expiry and nothing here names it: not this sweep's, not even listed.
    expect(await t.app.ctx.uploadSweep.run(later())).toEqual({ examined: 4, swept: 1 });
    expect(await storage.stat(chunk)).not.toBeNull();
    expect(await storage.stat(keys.unnamed)).toBeNull();
    for (const key of [keys.first, keys.second, keys.afterNewline]) {
      expect(await storage.stat(key), key).not.toBeNull();
    }
  });

  it('deletes files several at once: one that cannot be deleted keeps its upload record and fails the discard, the others go with theirs', async () => {
    // More files than the local store deletes at once.
    const files = [];
    for (let i = 0; i < 40; i += 1) files.push(await upload(t, `orphan-${i}.bin`, `bytes ${i}`));
    const keys = files.map((file) => keyFromFilePath(file.filePath) ?? '');
    const stuck = keys[7] ?? '';
    const recorded = async () =>
      new Set((await t.app.ctx.db.selectFrom('files').select('key').execute()).map((row) => row.key));
    const entry = storage.localPath?.(stuck);
    if (entry) {
      // A folder where the file was: the store deletes files, never folders.
      fs.rmSync(entry);
      fs.mkdirSync(path.join(entry, 'inside'), { recursive: true });
      await expect(t.app.ctx.files.discardKeys([...keys, '2026-01/never-stored.bin'])).rejects.toThrow();
      expect([...(await recorded())]).toEqual([stuck]);
      for (const key of keys) if (key !== stuck) expect(await storage.stat(key), key).toBeNull();
    } else {
      // One request for all of them: when S3 fails it, every file keeps its record.
      s3.fail((request) => request.method === 'POST' && 'delete' in request.query);
      try {
        await expect(t.app.ctx.files.discardKeys(keys)).rejects.toThrow();
      } finally {
        s3.fail(null);
      }
      expect((await recorded()).size).toBe(keys.length);
      expect(await stored(files[0]?.filePath ?? '')).toBe(true);
      // A thousand keys a request (S3's limit); keys already gone are fine.
      const sent = vi.spyOn((storage as S3Storage).client, 'send');
      const gone = Array.from({ length: 1001 }, (_, i) => `2026-01/gone-${i}.bin`);
      expect(await storage.deleteMany([...keys, ...gone])).toEqual([]);
      const sizes = sent.mock.calls.map(
        ([command]) => (command.input as DeleteObjectsCommandInput).Delete?.Objects?.length,
      );
      sent.mockRestore();
      expect(sizes).toEqual([1000, keys.length + 1]);
      for (const key of keys) expect(await storage.stat(key), key).toBeNull();
    }
  });

  async function signVersion(file: { filePath: string }, slug: string, versionCode: number, sha256: string) {
    const local = path.join(keysDir, `${slug}-${versionCode}-${Date.now()}`);
    const body = await storage.read(keyFromFilePath(file.filePath) ?? '');
    const chunks: Buffer[] = [];
    for await (const chunk of body) chunks.push(chunk as Buffer);
    fs.writeFileSync(local, Buffer.concat(chunks));
    return signFile(publisher, local, versionTrustedComment({ slug, versionCode, sha256 }));
  }

  it('an upload refused for its signature is deleted at once; a named file with the same path survives a refusal', async () => {
    const pkg = await createPackage(t, { slug: 'signed', name: '启动器' });
    const url = `/api/software/${pkg.id}/versions`;
    const refusedFile = await upload(t, 'launcher.zip', 'an unsigned build');
    const unsigned = await admin(t, 'POST', url, { version: '1', versionCode: 1, filePath: refusedFile.filePath });
    expect(unsigned.statusCode, unsigned.body).toBe(400);
    expect(unsigned.json().error).toMatch(/^body\.fileSignature: is required/);
    expect(await stored(refusedFile.filePath)).toBe(false);

    const badFile = await upload(t, 'launcher.zip', 'a build signed for another version');
    const wrong = await signVersion(badFile, 'signed', 9, badFile.sha256);
    const bad = await admin(t, 'POST', url, {
      version: '1',
      versionCode: 1,
      filePath: badFile.filePath,
      fileSignature: wrong,
    });
    expect(bad.statusCode, bad.body).toBe(400);
    expect(bad.json().error).toMatch(/^body\.fileSignature: .*expected "package=signed versionCode=1 /);
    expect(await stored(badFile.filePath)).toBe(false);

    const good = await upload(t, 'launcher.zip', 'a signed build');
    await createVersion(t, pkg.id, {
      version: '1',
      versionCode: 1,
      filePath: good.filePath,
      fileSignature: await signVersion(good, 'signed', 1, good.sha256),
    });
    // Version 2 names the same file with the signature of version 1: refused, and the file stays.
    const again = await admin(t, 'POST', url, {
      version: '2',
      versionCode: 2,
      filePath: good.filePath,
      fileSignature: await signVersion(good, 'signed', 1, good.sha256),
    });
    expect(again.statusCode, again.body).toBe(400);
    expect(await stored(good.filePath)).toBe(true);
    const download = await t.inject({ method: 'GET', url: good.filePath });
    expect(download.statusCode).toBe(200);
    expect(download.body).toBe('a signed build');
  });
});
