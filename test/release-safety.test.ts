import { generateKeyPairSync } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { followRotation, type SigningKey } from '../docs/examples/verify.js';
import { admin, buildTestApp, createPackage, createVersion, type TestApp, upload } from './helpers/app.js';
import { bucketOf } from './helpers/bucket.js';
import { type Answer, digestHeaderOf, libraryVerifies, SIGNATURE_HEADERS, verified } from './helpers/signed.js';
import { ConfigError } from '../src/config.js';
import { setClock } from '../src/domain/clock.js';
import { Signer } from '../src/modules/signing/signer.js';

let t: TestApp;
let file: { filePath: string; sha256: string };

beforeAll(async () => {
  t = await buildTestApp({ APP_NAME: 'rs' });
  file = await upload(t, 'setup.exe', 'installer'.repeat(50));
});
afterAll(() => t.close());

const version = (code: number, extra: Record<string, unknown> = {}) => ({
  version: `1.${code}`,
  versionCode: code,
  filePath: file.filePath,
  ...extra,
});

async function check(slug: string, code: number, deviceId?: string) {
  const device = deviceId === undefined ? '' : `&deviceId=${encodeURIComponent(deviceId)}`;
  const res = await t.inject(`/api/software/check-update?slug=${slug}&versionCode=${code}${device}`);
  return res;
}

async function offered(slug: string, code: number, deviceId?: string): Promise<number | null> {
  const res = await check(slug, code, deviceId);
  return res.statusCode === 200 ? res.json<{ latest: { versionCode: number } }>().latest.versionCode : null;
}

async function keys(): Promise<SigningKey[]> {
  return (await t.inject('/api/signing-keys')).json<SigningKey[]>();
}

describe('new parameters are validated with a 400 naming the field', () => {
  it('publishAt, rolloutPercent, autoHalt, deviceId', async () => {
    const pkg = await createPackage(t, { slug: 'valid', name: '校验' });
    const bad: [string, string, Record<string, unknown>, string][] = [
      ['POST', `/api/software/${pkg.id}/versions`, version(1, { publishAt: 'tomorrow' }), 'body.publishAt'],
      ['POST', `/api/software/${pkg.id}/versions`, version(1, { rolloutPercent: 101 }), 'body.rolloutPercent'],
      ['POST', `/api/software/${pkg.id}/versions`, version(1, { rolloutPercent: 12.5 }), 'body.rolloutPercent'],
      [
        'POST',
        `/api/software/${pkg.id}/versions`,
        version(1, { autoHalt: { maxQuietRate: 2, minDevices: 5 } }),
        'body.autoHalt',
      ],
      ['POST', '/api/articles', { slug: 'a', title: 'A', publishAt: 'tomorrow' }, 'body.publishAt'],
      ['POST', '/api/releases', { addonId: 'x', version: '1', publishAt: 'soon' }, 'body.publishAt'],
    ];
    for (const [method, url, body, field] of bad) {
      const res = await admin(t, method as 'POST', url, body);
      expect(res.statusCode, `${url} ${JSON.stringify(body)}`).toBe(400);
      expect(res.json<{ error: string }>().error).toContain(field);
    }
    const v = await createVersion(t, pkg.id, version(1));
    const put = await admin(t, 'PUT', `/api/software/versions/${v.id}`, { rolloutPercent: -1 });
    expect(put.statusCode).toBe(400);
    expect(put.json<{ error: string }>().error).toContain('body.rolloutPercent');
    const long = await check('valid', 0, 'd'.repeat(129));
    expect(long.statusCode).toBe(400);
    expect(long.json<{ error: string }>().error).toContain('querystring.deviceId');
    expect((await check('valid', 0, 'd'.repeat(128))).statusCode).toBe(200);
  });
});

describe('staged rollouts', () => {
  it('offers a 10% version to 10% (±1.5%) of 10,000 devices by the bucket rule, stably, and keeps them when ramped to 50%', async () => {
    const pkg = await createPackage(t, { slug: 'rs-launcher', name: '启动器' });
    await createVersion(t, pkg.id, version(100));
    const staged = await createVersion(t, pkg.id, version(110, { rolloutPercent: 10 }));
    expect(staged).toMatchObject({ rolloutPercent: 10 });
    const devices = Array.from({ length: 10_000 }, (_, i) => `device-${i}-${(i * 7919) % 1000}`);

    const offeredAt10 = new Set<string>();
    for (const device of devices) {
      const code = await offered('rs-launcher', 100, device);
      expect(code === 110).toBe(bucketOf(staged.id, device) < 10);
      if (code === 110) offeredAt10.add(device);
    }
    expect(Math.abs(offeredAt10.size / devices.length - 0.1)).toBeLessThanOrEqual(0.015);
    // The same device always gets the same answer.
    for (const device of devices.slice(0, 200)) {
      expect(await offered('rs-launcher', 100, device)).toBe(offeredAt10.has(device) ? 110 : 100);
    }

    // Unidentified clients and the website: the newest version at 100.
    expect(await offered('rs-launcher', 100)).toBe(100);
    const info = (await t.inject('/api/software/latest?info=1')).json();
    expect(info).toMatchObject({ available: true, versionCode: 100 });

    expect((await admin(t, 'PUT', `/api/software/versions/${staged.id}`, { rolloutPercent: 50 })).statusCode).toBe(200);
    let at50 = 0;
    for (const device of devices) {
      const code = await offered('rs-launcher', 100, device);
      if (offeredAt10.has(device)) expect(code).toBe(110);
      if (code === 110) at50 += 1;
    }
    expect(Math.abs(at50 / devices.length - 0.5)).toBeLessThanOrEqual(0.015);

    // Halt: 0 offers it to no new device; devices already on it have no update.
    await admin(t, 'PUT', `/api/software/versions/${staged.id}`, { rolloutPercent: 0 });
    const inside = [...offeredAt10][0]!;
    expect(await offered('rs-launcher', 100, inside)).toBe(100);
    expect((await check('rs-launcher', 110, inside)).json()).toMatchObject({ hasUpdate: false, downgrade: false });

    // At 100 everyone, and the website, gets it.
    await admin(t, 'PUT', `/api/software/versions/${staged.id}`, { rolloutPercent: 100 });
    expect(await offered('rs-launcher', 100)).toBe(110);
    expect((await t.inject('/api/software/latest?info=1')).json()).toMatchObject({ versionCode: 110 });
    const page = await t.inject('/download/launcher');
    expect(page.statusCode).toBe(200);
  });

  it('versions carry rolloutPercent, publishAt and revokedAt wherever versions are listed', async () => {
    const pkg = await createPackage(t, { slug: 'fields', name: '字段' });
    await createVersion(t, pkg.id, version(1, { rolloutPercent: 30 }));
    const fields = { rolloutPercent: 30, publishAt: null, revokedAt: null };
    expect((await t.inject('/api/software/fields')).json().versions[0]).toMatchObject(fields);
    expect((await t.inject('/api/software/changelog?slug=fields')).json().versions[0]).toMatchObject(fields);
    const list = (await t.inject('/api/software')).json<{ slug: string; versions: unknown[] }[]>();
    expect(list.find((p) => p.slug === 'fields')?.versions[0]).toMatchObject(fields);
    // check-update's latest keeps its shape.
    const latest = (await check('fields', 0, 'any')).json<{ latest: Record<string, unknown> }>().latest;
    expect(Object.keys(latest)).not.toContain('rolloutPercent');
  });
});

describe('revocation', () => {
  it('sends devices on a revoked version back (downgrade), answers 410 to its download, and can be undone', async () => {
    const pkg = await createPackage(t, { slug: 'revoke', name: '撤回' });
    const v1 = await createVersion(t, pkg.id, version(1));
    const v2 = await createVersion(t, pkg.id, version(2));
    const revoked = await admin(t, 'POST', `/api/software/versions/${v2.id}/revoke`);
    expect(revoked.statusCode).toBe(200);
    expect(revoked.json()).toMatchObject({ id: v2.id, revokedAt: expect.any(String) });

    expect((await check('revoke', 2, 'dev')).json()).toMatchObject({
      hasUpdate: true,
      forceUpdate: true,
      downgrade: true,
      latest: { versionCode: 1 },
    });
    expect((await check('revoke', 2)).json()).toMatchObject({ downgrade: true, latest: { versionCode: 1 } });
    expect((await check('revoke', 0)).json()).toMatchObject({ hasUpdate: true, forceUpdate: false, downgrade: false });
    expect((await check('revoke', 1)).json()).toMatchObject({ hasUpdate: false, downgrade: false });

    const gone = await t.inject(`/api/software/download/${v2.id}`);
    expect(gone.statusCode).toBe(410);
    expect(gone.json()).toEqual({ error: expect.any(String) });
    expect((await t.inject(`/api/software/download/${v1.id}`)).statusCode).toBe(200);
    // Still listed, with revokedAt; the latest is the remaining one.
    const detail = (await t.inject('/api/software/revoke')).json<{ versions: Record<string, unknown>[] }>();
    expect(detail.versions.map((v) => [v.versionCode, v.isLatest, v.revokedAt !== null])).toEqual([
      [2, false, true],
      [1, true, false],
    ]);

    const back = await admin(t, 'POST', `/api/software/versions/${v2.id}/unrevoke`);
    expect(back.json()).toMatchObject({ revokedAt: null });
    expect((await check('revoke', 2, 'dev')).json()).toMatchObject({ hasUpdate: false, downgrade: false });
    expect((await t.inject(`/api/software/download/${v2.id}`)).statusCode).toBe(200);
    expect((await admin(t, 'POST', '/api/software/versions/nope/revoke')).statusCode).toBe(404);
  });

  it('the launcher package with nothing left: latest?info=1 is {available: false}, the download 404', async () => {
    const other = await buildTestApp();
    try {
      const pkg = await createPackage(other, { slug: 'app-launcher', name: '启动器' });
      const only = await createVersion(other, pkg.id, {
        version: '1',
        versionCode: 1,
        downloadType: 'url',
        externalUrl: 'https://x.test/1',
      });
      expect((await other.inject('/api/software/latest?info=1')).json()).toMatchObject({ available: true });
      await admin(other, 'POST', `/api/software/versions/${only.id}/revoke`);
      expect((await other.inject('/api/software/latest?info=1')).json()).toEqual({ available: false });
      expect((await other.inject('/download/launcher')).statusCode).toBe(404);
      expect((await other.inject('/api/software/latest')).statusCode).toBe(404);
      const cors = await other.inject({ url: '/api/software', headers: { origin: 'https://site.example.test' } });
      const exposed = String(cors.headers['access-control-expose-headers']).split(/,\s*/);
      expect(exposed).toEqual(expect.arrayContaining(['Content-Digest', 'Signature-Input', 'Signature']));
    } finally {
      await other.close();
    }
  });

  it('a package with nothing left answers as one without versions', async () => {
    const pkg = await createPackage(t, { slug: 'rs-launcher-empty', name: '空' });
    const only = await createVersion(t, pkg.id, version(5));
    await admin(t, 'POST', `/api/software/versions/${only.id}/revoke`);
    expect((await check('rs-launcher-empty', 5, 'dev')).statusCode).toBe(404);
    const list = (await t.inject('/api/software')).json<{ slug: string; versions: unknown[] }[]>();
    expect(list.find((p) => p.slug === 'rs-launcher-empty')?.versions).toEqual([]);
  });
});

describe('scheduled publishing', () => {
  it('hides a scheduled version, release and article everywhere until its time, then shows them within 1 s with no write', async () => {
    const pkg = await createPackage(t, { slug: 'sched', name: '定时' });
    const v1 = await createVersion(t, pkg.id, version(1));
    const addon = (
      await admin(t, 'POST', '/api/addons', { slug: 'sched-addon', name: '插件', summary: '摘要' })
    ).json();
    const r1 = (
      await admin(t, 'POST', '/api/releases', { addonId: addon.id, version: '1.0', filePath: file.filePath })
    ).json();

    const time = Date.now() + 2500;
    const publishAt = new Date(time).toISOString();
    const v2 = await createVersion(t, pkg.id, version(2, { publishAt }));
    expect(v2).toMatchObject({ publishAt, isLatest: false });
    const r2 = await admin(t, 'POST', '/api/releases', {
      addonId: addon.id,
      version: '2.0',
      filePath: file.filePath,
      publishAt,
    });
    expect(r2.json()).toMatchObject({ publishAt });
    const article = await admin(t, 'POST', '/api/articles', { slug: 'sched-news', title: '公告', publishAt });
    expect(article.statusCode).toBe(201);

    // Hidden in every answer received before the time: an answer that arrives later may rightly show
    // them (under load one pass of these requests can take longer than the margin of the loop below).
    // Answers whether every check of the pass was made (all its answers arrived before the time).
    const hidden = async (): Promise<boolean> => {
      let made = 0;
      const before = async <T>(answer: Promise<T>, check: (value: T) => void) => {
        const value = await answer;
        if (Date.now() < time) {
          check(value);
          made++;
        }
      };
      await before(offered('sched', 0, 'dev'), (code) => expect(code).toBe(1));
      await before(t.inject('/api/software/sched'), (res) =>
        expect(res.json<{ versions: { id: string }[] }>().versions.map((v) => v.id)).toEqual([v1.id]),
      );
      await before(t.inject('/api/software/changelog?slug=sched'), (res) =>
        expect(res.json<{ versions: unknown[] }>().versions).toHaveLength(1),
      );
      await before(t.inject(`/api/software/download/${v2.id}`), (res) => expect(res.statusCode).toBe(404));
      await before(t.inject('/api/addons/sched-addon'), (res) =>
        expect(
          res.json<{ releases: { id: string; isLatest: boolean }[] }>().releases.map((r) => [r.id, r.isLatest]),
        ).toEqual([[r1.id, true]]),
      );
      await before(t.inject('/api/addons'), (res) =>
        expect(
          res
            .json<{ slug: string; releases: { id: string }[] }[]>()
            .find((a) => a.slug === 'sched-addon')
            ?.releases.map((r) => r.id),
        ).toEqual([r1.id]),
      );
      await before(t.inject(`/api/releases?addonId=${addon.id}`), (res) =>
        expect(res.json<unknown[]>()).toHaveLength(1),
      );
      await before(t.inject(`/api/download/${r2.json().id}`), (res) => expect(res.statusCode).toBe(404));
      await before(t.inject('/api/articles?published=false'), (res) =>
        expect(res.json<{ slug: string }[]>().map((a) => a.slug)).not.toContain('sched-news'),
      );
      await before(t.inject('/api/articles/sched-news'), (res) => expect(res.statusCode).toBe(404));
      return made === 10;
    };
    let wholePasses = (await hidden()) ? 1 : 0;

    // Administrators see the scheduled rows with publishAt.
    const adminDetail = (await admin(t, 'GET', '/api/admin/software/sched')).json<{
      versions: { publishAt: string | null }[];
    }>();
    expect(adminDetail.versions.map((v) => v.publishAt)).toEqual([publishAt, null]);
    const adminAddon = (await admin(t, 'GET', '/api/admin/addons/sched-addon')).json<{ releases: unknown[] }>();
    expect(adminAddon.releases).toHaveLength(2);
    const adminArticles = (await admin(t, 'GET', '/api/admin/articles')).json<{ slug: string; publishAt: string }[]>();
    expect(adminArticles.find((a) => a.slug === 'sched-news')?.publishAt).toBe(publishAt);

    // No write from here on: poll until the time has passed.
    while (Date.now() < time - 50) {
      if (await hidden()) wholePasses++;
      await new Promise((r) => setTimeout(r, 200));
    }
    // The rule was checked, not skipped: passes with every answer before the time (2.5 s of them).
    expect(wholePasses).toBeGreaterThanOrEqual(2);
    let seenAt = 0;
    while (Date.now() < time + 1000) {
      if ((await offered('sched', 0, 'dev')) === 2) {
        seenAt = Date.now();
        break;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(seenAt).toBeGreaterThanOrEqual(time);
    expect(seenAt - time).toBeLessThan(1000);
    expect((await t.inject('/api/software/sched')).json().versions).toHaveLength(2);
    const catalogue = (await t.inject('/api/addons')).json<{ slug: string; releases: { id: string }[] }[]>();
    expect(catalogue.find((a) => a.slug === 'sched-addon')?.releases.map((r) => r.id)).toEqual([r2.json().id]);
    expect((await t.inject('/api/articles/sched-news')).statusCode).toBe(200);
    expect((await t.inject(`/api/download/${r2.json().id}`)).statusCode).toBe(200);
  });
});

describe('signed answers', () => {
  const signedPaths = [
    '/api/software/check-update?slug=signed&versionCode=0&deviceId=abc',
    '/api/software/latest?info=1',
    '/api/software/changelog?slug=signed',
    '/api/software',
    '/api/software/signed',
    '/api/addons',
    '/api/addons/signed-addon',
    '/api/releases',
  ];

  beforeAll(async () => {
    const pkg = await createPackage(t, { slug: 'signed', name: '签名' });
    await createVersion(t, pkg.id, version(7));
    await admin(t, 'POST', '/api/addons', { slug: 'signed-addon', name: '插件', summary: '摘要' });
  });

  it('publishes one active Ed25519 key', async () => {
    const listed = await keys();
    expect(listed).toEqual([
      {
        keyId: expect.stringMatching(/^[0-9a-f]{16}$/),
        algorithm: 'ed25519',
        publicKey: expect.any(String),
        createdAt: expect.any(String),
        status: 'active',
        endorsement: null,
      },
    ]);
    expect(Buffer.from(listed[0]!.publicKey, 'base64')).toHaveLength(32);
  });

  /** The `created` of each member of an answer's Signature-Input, by label. */
  const createdOf = (res: Answer) =>
    [...String(res.headers['signature-input']).matchAll(/(sig\d+)=\([^)]*\);created=(\d+);/g)].map((m) => [
      m[1],
      Number(m[2]),
    ]);

  it('signs every answer that tells a client what to download (RFC 9530 digest, RFC 9421 signature), verifiable with the published key only', async () => {
    const pinned = await keys();
    const keyId = pinned[0]!.keyId;
    for (const path of signedPaths) {
      const res = await t.inject(path);
      expect(res.statusCode, path).toBe(200);
      expect(res.headers['content-digest'], path).toBe(digestHeaderOf(res.rawPayload));
      const covered = path.startsWith('/api/software/check-update?')
        ? '"@path";req "@query-param";name="slug";req "@query-param";name="versionCode";req'
        : '"@path";req "@query";req';
      const input = String(res.headers['signature-input']);
      expect(input, path).toMatch(/^sig1=\([^)]*\);created=\d+;expires=\d+;keyid="[0-9a-f]{16}";alg="ed25519"$/);
      expect(input.slice('sig1='.length, input.indexOf(')') + 1), path).toBe(`("content-digest" ${covered})`);
      expect(input, path).toContain(`;keyid="${keyId}";`);
      const [, created, expires] = /;created=(\d+);expires=(\d+);/.exec(input)!;
      expect(Number(expires) - Number(created), path).toBe(3600);
      expect(res.headers.signature, path).toMatch(/^sig1=:[A-Za-z0-9+/]{86}==:$/);
      expect(verified(res, pinned), path).toBe(true);
      expect(await libraryVerifies(res, pinned[0]!), path).toBe(true);
      // A one-byte change of the body fails, and so does a digest made anew for the changed bytes.
      const tampered = Buffer.from(res.rawPayload);
      const at = tampered.length - 2;
      tampered[at] = tampered.readUInt8(at) ^ 1;
      expect(verified({ ...res, rawPayload: tampered }, pinned), path).toBe(false);
      const redigested = { ...res, headers: { ...res.headers, 'content-digest': digestHeaderOf(tampered) } };
      expect(verified({ ...redigested, rawPayload: tampered }, pinned), path).toBe(false);
      expect(await libraryVerifies(redigested, pinned[0]!), path).toBe(false);
    }
  });

  it("check-update's latest names the stored file's original name, in the signed body; an external link none", async () => {
    const pinned = await keys();
    const res = await check('signed', 0);
    expect(res.json<{ latest: { fileName?: string } }>().latest.fileName).toBe('setup.exe');
    expect(verified(res, pinned)).toBe(true);
    // Another name in the body (a proxy's) fails the signature, the digest made anew or not.
    const renamed = Buffer.from(res.rawPayload.toString('utf8').replace('"setup.exe"', '"setup.bat"'));
    expect(renamed.equals(res.rawPayload)).toBe(false);
    expect(verified({ ...res, rawPayload: renamed }, pinned)).toBe(false);
    const redigested = { ...res, headers: { ...res.headers, 'content-digest': digestHeaderOf(renamed) } };
    expect(verified({ ...redigested, rawPayload: renamed }, pinned)).toBe(false);
    const linked = await createPackage(t, { slug: 'signed-link', name: '链接' });
    await createVersion(t, linked.id, {
      version: '1.0',
      versionCode: 1,
      downloadType: 'url',
      externalUrl: 'https://cdn.example.test/setup.exe',
    });
    const link = await check('signed-link', 0);
    expect(link.statusCode).toBe(200);
    expect(link.json<{ latest: object }>().latest).not.toHaveProperty('fileName');
  });

  it('check-update carries signedAt; 304s, HEAD answers, errors and other reads carry none of the signature headers', async () => {
    const res = await check('signed', 0, 'abc');
    expect(Date.now() - Date.parse(res.json<{ signedAt: string }>().signedAt)).toBeLessThan(60 * 60 * 1000);
    const listed = await t.inject('/api/software');
    const etag = listed.headers.etag as string;
    const revalidated = await t.inject({ url: '/api/software', headers: { 'if-none-match': etag } });
    expect(revalidated.statusCode).toBe(304);
    const head = await t.inject({ method: 'HEAD', url: '/api/software/check-update?slug=signed' });
    expect(head.statusCode).toBe(200);
    const headList = await t.inject({ method: 'HEAD', url: '/api/addons' });
    expect(headList.statusCode).toBe(200);
    const missing = await t.inject('/api/software/check-update?slug=none');
    expect(missing.statusCode).toBe(404);
    const bad = await t.inject('/api/software/check-update?slug=signed&versionCode=x');
    expect(bad.statusCode).toBe(400);
    const notFound = await t.inject('/api/addons/nope');
    expect(notFound.statusCode).toBe(404);
    const articles = await t.inject('/api/articles');
    for (const other of [revalidated, head, headList, missing, bad, notFound, articles]) {
      for (const name of SIGNATURE_HEADERS) expect(other.headers[name], name).toBeUndefined();
    }
  });

  it('created is the signing time, never an hour old: a kept signature is made anew once old, on the controlled clock', async () => {
    const pinned = await keys();
    const url = '/api/software/check-update?slug=signed&versionCode=0&deviceId=abc';
    const first = await t.inject(url);
    const [[, created]] = createdOf(first) as [[string, number]];
    expect(Math.abs(Date.now() / 1000 - created)).toBeLessThan(5);
    // Kept: the same bytes, the same signature.
    const again = await t.inject(url);
    expect(again.headers.signature).toBe(first.headers.signature);
    const later = Date.now() + 2 * 60 * 60 * 1000;
    setClock(() => later);
    try {
      const old = await t.inject(url);
      expect(createdOf(old)).toEqual([['sig1', Math.floor(later / 1000)]]);
      expect(verified(old, pinned)).toBe(true);
      expect(await libraryVerifies(old, pinned[0]!)).toBe(true);
      // The launcher's check: the first answer, replayed two hours later, is refused.
      expect(verified(first, pinned)).toBe(false);
    } finally {
      setClock(null);
      // Entries kept under the moved clock go: later tests see answers signed now.
      await t.app.ctx.cache.bump();
    }

    // The signer's own threshold, with a key set that never changes (a key file).
    const { privateKey } = generateKeyPairSync('ed25519');
    const keyFile = path.join(t.dir, 'threshold.pem');
    fs.writeFileSync(keyFile, privateKey.export({ format: 'pem', type: 'pkcs8' }));
    const signer = new Signer(t.database.db, t.app.ctx.cache, { keyFile, overlapDays: 30, publicBaseUrl: null });
    const body = Buffer.from('{"a":1}');
    const start = Date.now();
    const at = (minutes: number) => setClock(() => start + minutes * 60 * 1000);
    try {
      at(0);
      const covered: [string, string][] = [['"@path";req', '/a']];
      const made = await signer.headers(body, covered);
      at(29);
      expect(await signer.headers(body, covered)).toBe(made);
      at(31);
      const remade = await signer.headers(body, covered);
      expect(remade['Content-Digest']).toBe(made['Content-Digest']);
      expect(remade['Signature-Input']).toContain(`;created=${Math.floor((start + 31 * 60 * 1000) / 1000)};`);
    } finally {
      setClock(null);
    }
  });

  it('rotation: the new key is endorsed by the old one, both sign during the overlap, a launcher pinning the old key follows', async () => {
    const pinned = await keys();
    const rotated = await admin(t, 'POST', '/api/admin/signing-keys/rotate');
    expect(rotated.statusCode).toBe(201);
    const fresh = rotated.json<SigningKey & { status: string }>();
    expect(fresh).toMatchObject({ status: 'active', endorsement: { keyId: pinned[0]!.keyId } });
    const listed = await keys();
    expect(listed.map((k) => [k.keyId, (k as SigningKey & { status: string }).status])).toEqual([
      [fresh.keyId, 'active'],
      [pinned[0]!.keyId, 'retired'],
    ]);

    const res = await check('signed', 0, 'abc');
    const members = String(res.headers['signature-input']).split(', ');
    expect(members.map((m) => [m.split('=')[0], /keyid="([^"]+)"/.exec(m)?.[1]])).toEqual([
      ['sig1', fresh.keyId],
      ['sig2', pinned[0]!.keyId],
    ]);
    expect(String(res.headers.signature)).toMatch(/^sig1=:[^:]+:, sig2=:[^:]+:$/);
    expect(verified(res, pinned)).toBe(true);
    expect(await libraryVerifies(res, pinned[0]!)).toBe(true);
    expect(await libraryVerifies(res, fresh)).toBe(true);

    const trusted = followRotation(pinned, listed);
    expect(trusted.map((k) => k.keyId)).toEqual([pinned[0]!.keyId, fresh.keyId]);
    expect(verified(res, [fresh])).toBe(true);
    // A key not endorsed by a pinned one is not adopted.
    const forged = {
      ...fresh,
      keyId: 'forged',
      endorsement: {
        keyId: pinned[0]!.keyId,
        signature: fresh.endorsement!.signature.replace(/^./, (c) => (c === 'A' ? 'B' : 'A')),
      },
    };
    expect(followRotation(pinned, [forged]).map((k) => k.keyId)).toEqual([pinned[0]!.keyId]);
  });

  it('SIGNING_KEY_FILE: answers are signed with that key; rotation is done by replacing the file', async () => {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const keyFile = path.join(t.dir, 'signing.pem');
    fs.writeFileSync(keyFile, privateKey.export({ format: 'pem', type: 'pkcs8' }));
    const other = await buildTestApp({ SIGNING_KEY_FILE: keyFile });
    try {
      const listed = (await other.inject('/api/signing-keys')).json<SigningKey[]>();
      const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x ?? '', 'base64url').toString('base64');
      expect(listed).toMatchObject([{ publicKey: raw, status: 'active', endorsement: null }]);
      const res = await other.inject('/api/software');
      expect(verified(res, listed)).toBe(true);
      expect(await libraryVerifies(res, listed[0]!)).toBe(true);
      expect((await admin(other, 'POST', '/api/admin/signing-keys/rotate')).statusCode).toBe(409);
    } finally {
      await other.close();
    }
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ format: 'pem', type: 'pkcs8' });
    fs.writeFileSync(keyFile, rsa);
    const signer = (keyFile: string) =>
      new Signer(t.database.db, t.app.ctx.cache, { keyFile, overlapDays: 30, publicBaseUrl: null });
    expect(() => signer(keyFile)).toThrow(/SIGNING_KEY_FILE .* not an Ed25519 key/);
    expect(() => signer(path.join(t.dir, 'missing.pem'))).toThrow(ConfigError);
  });

  it('after the overlap only the new key signs, and the pinned launcher still verifies through the endorsement', async () => {
    const other = await buildTestApp({ SIGNING_OVERLAP_DAYS: '0' });
    try {
      const pinned = (await other.inject('/api/signing-keys')).json<SigningKey[]>();
      await admin(other, 'POST', '/api/admin/signing-keys/rotate');
      const res = await other.inject('/api/software');
      expect(String(res.headers['signature-input'])).toMatch(/^sig1=[^,]+$/);
      expect(verified(res, pinned)).toBe(false);
      expect(await libraryVerifies(res, pinned[0]!)).toBe(false);
      const listed = (await other.inject('/api/signing-keys')).json<SigningKey[]>();
      expect(verified(res, followRotation(pinned, listed))).toBe(true);
    } finally {
      await other.close();
    }
  });
  it('each member covers the request it answers: one signature serves every device with the same slug and versionCode, never another request', async () => {
    const pinned = await keys();
    const one = await check('signed', 3, 'device-one');
    const two = await t.inject('/api/software/check-update?slug=signed&versionCode=3&deviceId=device-two&lang=en');
    const noDevice = await check('signed', 3);
    // The same rendered answer (lang aside), one kept signature: not one per device.
    expect(two.headers.signature).not.toBe(one.headers.signature); // another language: another answer
    expect(noDevice.headers['content-digest']).toBe(one.headers['content-digest']);
    expect(noDevice.headers.signature).toBe(one.headers.signature);
    for (const res of [one, two, noDevice]) {
      expect(verified(res, pinned)).toBe(true);
      expect(await libraryVerifies(res, pinned[0]!)).toBe(true);
    }
    // The same bytes for versionCode 4: signed anew, and the first signature does not verify for it.
    const other = await check('signed', 4, 'device-one');
    expect(other.headers['content-digest']).toBe(one.headers['content-digest']);
    expect(other.headers.signature).not.toBe(one.headers.signature);
    const moved = (answer: Answer, url: string) => ({ ...answer, raw: { req: { ...answer.raw.req, url } } });
    for (const url of [
      '/api/software/check-update?slug=signed&versionCode=4&deviceId=device-one',
      '/api/software/check-update?slug=signed-patch&versionCode=3',
      '/api/software/check-update/?slug=signed&versionCode=3',
    ]) {
      expect(verified(moved(one, url), pinned), url).toBe(false);
      expect(await libraryVerifies(moved(one, url), pinned[0]!), url).toBe(false);
    }
    // Without versionCode: answered as for 0, and the members omit that component.
    const bare = await t.inject('/api/software/check-update?slug=signed');
    expect(String(bare.headers['signature-input'])).toMatch(
      /^sig1=\("content-digest" "@path";req "@query-param";name="slug";req\);/,
    );
    expect(await libraryVerifies(bare, pinned[0]!)).toBe(true);
    // Other answers cover the whole query: another page or language is another request.
    const list = await t.inject('/api/software?x=1');
    expect(await libraryVerifies(list, pinned[0]!)).toBe(true);
    expect(await libraryVerifies(moved(list, '/api/software?x=2'), pinned[0]!)).toBe(false);
  });

  it("a signed POST covers the request's own Content-Digest, which the service checks: 400 {error} on a mismatch", async () => {
    const pinned = await keys();
    const payload = Buffer.from(JSON.stringify({ installed: [{ slug: 'signed-addon', version: '0.1' }] }));
    const post = (headers: Record<string, string>) =>
      t.inject({
        method: 'POST',
        url: '/api/addons/updates',
        headers: { 'content-type': 'application/json', ...headers },
        payload,
      });
    const good = await post({ 'content-digest': digestHeaderOf(payload) });
    expect(good.statusCode).toBe(200);
    expect(String(good.headers['signature-input'])).toMatch(
      /^sig1=\("content-digest" "@path";req "content-digest";req\);/,
    );
    expect(verified(good, pinned)).toBe(true);
    expect(await libraryVerifies(good, pinned[0]!)).toBe(true);
    // Passed off as the answer to another body: refused.
    const otherBody = {
      ...good,
      raw: {
        req: {
          ...good.raw.req,
          headers: { ...good.raw.req.headers, 'content-digest': digestHeaderOf(Buffer.from('{}')) },
        },
      },
    };
    expect(verified(otherBody, pinned)).toBe(false);
    expect(await libraryVerifies(otherBody, pinned[0]!)).toBe(false);
    for (const digest of [
      digestHeaderOf(Buffer.from('{"installed":[]}')),
      'sha-256=:AAAA:',
      'sha-512=:AAAA:',
      'not a digest',
    ]) {
      const refused = await post({ 'content-digest': digest });
      expect(refused.statusCode, digest).toBe(400);
      expect(refused.json<{ error: string }>().error, digest).toMatch(/content-digest/);
      for (const name of SIGNATURE_HEADERS) expect(refused.headers[name], name).toBeUndefined();
    }
    // Without one: answered, members without "content-digest";req.
    const plain = await post({});
    expect(String(plain.headers['signature-input'])).toMatch(/^sig1=\("content-digest" "@path";req\);/);
    expect(await libraryVerifies(plain, pinned[0]!)).toBe(true);
  });

  it("PUBLIC_BASE_URL's path is part of @path: the path the launcher requested", async () => {
    const other = await buildTestApp({ PUBLIC_BASE_URL: 'https://updates.example.test/prefix/' });
    try {
      const pinned = (await other.inject('/api/signing-keys')).json<SigningKey[]>();
      const res = await other.inject('/api/software');
      expect(verified(res, pinned, 'https://updates.example.test/prefix')).toBe(true);
      expect(await libraryVerifies(res, pinned[0]!, 'https://updates.example.test/prefix')).toBe(true);
      expect(verified(res, pinned)).toBe(false);
    } finally {
      await other.close();
    }
  });
});
