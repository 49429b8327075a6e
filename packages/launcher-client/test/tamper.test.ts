import { generateKeyPairSync } from 'node:crypto';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { admin, upload } from '../../../test/helpers/app.js';
import { setClock } from '../../../src/domain/clock.js';
import { bucketOf } from '../../../test/helpers/bucket.js';
import { ENGINE } from '../../../test/helpers/db.js';
import {
  AbortedError,
  AnswerTooLargeError,
  ClockError,
  DigestError,
  NetworkError,
  RollbackError,
  SignatureError,
  StaleAnswerError,
  type TrustedKey,
  UpdateManager,
  type UpdateManagerOptions,
} from '../src/index.js';
import {
  type Answer,
  downloadsOf,
  forward,
  launcherPackage,
  publishVersion,
  type Service,
  signLikeTheService,
  startService,
  startTwin,
} from './helpers.js';

const CLI = path.resolve(import.meta.dirname, '../src/cli.ts');

let s: Service;
let pinned: TrustedKey[];
beforeAll(async () => {
  s = await startService();
  pinned = await s.keys();
  const full = await launcherPackage(s.t, 'tam-launcher');
  await publishVersion(s.t, full, 1);
  await publishVersion(s.t, full, 2, { forceUpdate: true });
});
afterEach(() => {
  s.proxy.rule = null;
  setClock(null);
});
afterAll(() => s.close());

function manager(options: Partial<UpdateManagerOptions> = {}) {
  return new UpdateManager({
    serverUrl: s.proxy.url,
    trustedKeys: pinned,
    stateDir: s.stateDir(),
    app: 'tam',
    retry: { baseDelayMs: 10 },
    ...options,
  });
}

/** Runs the CLI against the proxy with the pinned keys and `stateDir` (on a clock `offsetMs` off). */
function cli(args: string[], stateDir: string, trustedKeys = pinned, offsetMs = 0) {
  const keys = path.join(stateDir, 'keys.json');
  fs.writeFileSync(keys, JSON.stringify(trustedKeys));
  const all = [...args, '--server', s.proxy.url, '--trust', keys, '--state', stateDir];
  const clock = `data:text/javascript,const real = Date.now; Date.now = () => real() + ${offsetMs};`;
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--import', clock, CLI, ...all]);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const isCheck = (url: string) => url.startsWith('/api/software/check-update');
const downloads = (from: number) => s.proxy.seen.slice(from).filter((r) => r.url.startsWith('/api/software/download'));

/** Changes each check-update answer with `change` (the service's answer otherwise untouched). */
function tamperChecks(change: (answer: Answer) => Answer) {
  s.proxy.rule = async (seen, upstream) => (isCheck(seen.url) ? change(await upstream()) : undefined);
}

function flipByte(body: Buffer): Buffer {
  const changed = Buffer.from(body);
  const at = changed.indexOf('"versionCode":2') + '"versionCode":'.length;
  changed[at] = '9'.charCodeAt(0);
  return changed;
}

describe('every answer is verified before anything is used', () => {
  it('accepts the service as it is', async () => {
    expect(await manager().checkForUpdates(1)).toMatchObject({ result: 'mandatory', update: { versionCode: 2 } });
  });

  it('a byte changed in an answer: DigestError, nothing downloaded', async () => {
    tamperChecks((a) => ({ ...a, body: flipByte(a.body) }));
    const from = s.proxy.seen.length;
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(DigestError);
    expect(downloads(from)).toEqual([]);
  });

  it('a byte changed and the digest made anew: SignatureError (the signature covers the digest)', async () => {
    tamperChecks((a) => {
      const body = flipByte(a.body);
      const { 'content-digest': digest } = signLikeTheService(
        body,
        generateKeyPairSync('ed25519').privateKey,
        'x',
        '/',
      );
      return { ...a, body, headers: { ...a.headers, 'content-digest': digest } };
    });
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(SignatureError);
  });

  it('the signature removed, or made malformed: SignatureError', async () => {
    tamperChecks((a) => ({ ...a, headers: { ...a.headers, signature: undefined, 'signature-input': undefined } }));
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(SignatureError);
    tamperChecks((a) => ({ ...a, headers: { ...a.headers, signature: 'sig1=:not base64!:' } }));
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(SignatureError);
    tamperChecks((a) => ({ ...a, headers: { ...a.headers, 'content-digest': undefined } }));
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(DigestError);
  });

  it('an answer compressed by a proxy cannot be checked as received: DigestError', async () => {
    const { gzipSync } = await import('node:zlib');
    tamperChecks((a) => ({ ...a, body: gzipSync(a.body), headers: { ...a.headers, 'content-encoding': 'gzip' } }));
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(DigestError);
  });

  it('signed by a key the app does not trust: SignatureError after looking for an endorsement', async () => {
    const stranger = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x ?? '';
    const stateDir = s.stateDir();
    const m = manager({
      stateDir,
      trustedKeys: [{ keyId: 'pinned-elsewhere', publicKey: Buffer.from(stranger, 'base64url').toString('base64') }],
    });
    const from = s.proxy.seen.length;
    await expect(m.checkForUpdates(1)).rejects.toThrow(/signed by no trusted key/);
    expect(s.proxy.seen.slice(from).map((r) => r.url)).toContain('/api/signing-keys');
    expect(fs.existsSync(path.join(stateDir, 'trusted-keys.json'))).toBe(false);
  });

  it('an attacker signing with its own key, listed as endorsed by nobody or by a forged endorsement: refused', async () => {
    const attacker = generateKeyPairSync('ed25519');
    const raw = Buffer.from(attacker.publicKey.export({ format: 'jwk' }).x ?? '', 'base64url').toString('base64');
    const forged = Buffer.alloc(64, 7).toString('base64');
    s.proxy.rule = async (seen, upstream) => {
      if (seen.url === '/api/signing-keys') {
        const listed = JSON.parse((await upstream()).body.toString()) as unknown[];
        const fake = (keyId: string, endorsement: unknown) => ({
          keyId,
          algorithm: 'ed25519',
          publicKey: raw,
          createdAt: new Date().toISOString(),
          status: 'active',
          endorsement,
        });
        const keys = [fake('evil1', null), fake('evil2', { keyId: pinned[0]!.keyId, signature: forged }), ...listed];
        return {
          status: 200,
          headers: { 'content-type': 'application/json' },
          body: Buffer.from(JSON.stringify(keys)),
        };
      }
      if (!isCheck(seen.url)) return undefined;
      const answer = await upstream();
      const body = flipByte(answer.body);
      return {
        ...answer,
        body,
        headers: { ...answer.headers, ...signLikeTheService(body, attacker.privateKey, 'evil2', seen.url) },
      };
    };
    const stateDir = s.stateDir();
    const from = s.proxy.seen.length;
    await expect(manager({ stateDir }).checkForUpdates(1)).rejects.toBeInstanceOf(SignatureError);
    expect(downloads(from)).toEqual([]);
    expect(fs.existsSync(path.join(stateDir, 'trusted-keys.json'))).toBe(false);
  });

  it('an expired answer is refused (signed 2 hours ago); one signed 65 s ago is accepted; maxAnswerAgeSeconds was dropped', async () => {
    const full = await launcherPackage(s.t, 'old-launcher');
    await publishVersion(s.t, full, 1);
    setClock(() => Date.now() - 2 * 3600_000);
    await expect(manager({ app: 'old' }).checkForUpdates(1)).rejects.toBeInstanceOf(StaleAnswerError);
    const fresh = await launcherPackage(s.t, 'sec-launcher');
    await publishVersion(s.t, fresh, 1);
    setClock(() => Date.now() - 65_000);
    await fetch(`${s.proxy.url}/api/software/check-update?slug=sec-launcher&versionCode=1`);
    setClock(null);
    const res = await fetch(`${s.proxy.url}/api/software/check-update?slug=sec-launcher&versionCode=1`);
    const created = Number(/;created=(\d+);/.exec(res.headers.get('signature-input') ?? '')?.[1]);
    expect(Date.now() / 1000 - created).toBeGreaterThanOrEqual(64);
    expect(await manager({ app: 'sec' }).checkForUpdates(1)).toMatchObject({ result: 'up-to-date' });
    expect(() => manager({ maxAnswerAgeSeconds: 60 } as unknown as UpdateManagerOptions)).toThrow(TypeError);
  });

  it('the CLI exits 2 with {error, kind} and leaves no file in downloads', async () => {
    tamperChecks((a) => ({ ...a, body: flipByte(a.body) }));
    const stateDir = s.stateDir();
    const run = await cli(['update', '--app', 'tam', '--version-code', '1'], stateDir);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(JSON.parse(run.stderr.trim())).toMatchObject({ kind: 'digest', error: expect.any(String) });
    expect(downloadsOf(stateDir)).toEqual([]);
  });
});

describe('a wrong clock is not an attack', () => {
  const MINUTE = 60_000;
  /** A package of its own with one version (each test its own signed answers). */
  async function fresh(app: string) {
    await publishVersion(s.t, await launcherPackage(s.t, `${app}-launcher`), 1);
  }
  /** A manager on a clock `offsetMs` off the real one. */
  const offClock = (app: string, offsetMs: number, options: Partial<UpdateManagerOptions> = {}) =>
    manager({ app, now: () => Date.now() + offsetMs, ...options });
  /**
   * The offset is measured against the answer's Date, which is whole seconds and renewed by Node once a
   * second on its event loop: never after the refusal, and no more than about 2 s before the request
   * was sent. So it is the clock's error plus at most the round trip and those 2 s, never less.
   */
  function expectOffset(offsetMs: number, clockErrorMs: number, sent: number, refused: number) {
    expect(offsetMs).toBeGreaterThanOrEqual(clockErrorMs);
    expect(offsetMs).toBeLessThanOrEqual(clockErrorMs + (refused - sent) + 2000);
  }
  /** The error a promise rejects with. */
  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      () => expect.unreachable(),
      (err: unknown) => err,
    );

  it('a clock 6 minutes slow: every genuine answer refused as kind clock (no attack), with the offset and a sentence', async () => {
    await fresh('slow');
    const sent = Date.now();
    const err = await refusal(offClock('slow', -6 * MINUTE).checkForUpdates(1));
    const refused = Date.now();
    expect(err).toBeInstanceOf(ClockError);
    expect(err).toMatchObject({
      kind: 'clock',
      verification: false,
      message: "this computer's clock is 6 minutes behind; set it and try again",
    });
    expectOffset((err as ClockError).offsetMs, -6 * MINUTE, sent, refused);
    // On the right clock, the same service's answers are taken.
    expect(await manager({ app: 'slow' }).checkForUpdates(1)).toMatchObject({ result: 'up-to-date' });
  });

  it("a Date seconds before the signature's created (a busy server's Date lags its clock): still kind clock, not stale", async () => {
    await fresh('lagging');
    tamperChecks((a) => {
      const created = Number(/;created=(\d+)/.exec(String(a.headers['signature-input'] ?? ''))?.[1]);
      return { ...a, headers: { ...a.headers, date: new Date((created - 3) * 1000).toUTCString() } };
    });
    const err = await refusal(offClock('lagging', -6 * MINUTE).checkForUpdates(1));
    s.proxy.rule = null;
    expect(err).toBeInstanceOf(ClockError);
    expect(err).toMatchObject({
      kind: 'clock',
      message: "this computer's clock is 6 minutes behind; set it and try again",
    });
  });

  it('a clock an hour fast: an answer the service signed 10 minutes ago (and keeps) is refused as kind clock', async () => {
    await fresh('fast');
    setClock(() => Date.now() - 10 * MINUTE);
    await fetch(`${s.proxy.url}/api/software/check-update?slug=fast-launcher&versionCode=1`);
    setClock(null);
    const sent = Date.now();
    const err = await refusal(offClock('fast', 60 * MINUTE).checkForUpdates(1));
    const refused = Date.now();
    expect(err).toBeInstanceOf(ClockError);
    expect(err).toMatchObject({
      kind: 'clock',
      message: "this computer's clock is 1 hour ahead; set it and try again",
    });
    expectOffset((err as ClockError).offsetMs, 60 * MINUTE, sent, refused);
    expect(await manager({ app: 'fast' }).checkForUpdates(1)).toMatchObject({ result: 'up-to-date' });
  });

  it('stays stale when the Date is outside created..expires (forged, or a replay of an expired answer), or the replay memory refuses it', async () => {
    await fresh('forged');
    // The Date moved past the answer's expires: the clock here is not what refuses it.
    tamperChecks((a) => ({ ...a, headers: { ...a.headers, date: new Date(Date.now() + 3 * 3600_000).toUTCString() } }));
    await expect(offClock('forged', -6 * MINUTE).checkForUpdates(1)).rejects.toBeInstanceOf(StaleAnswerError);
    tamperChecks((a) => ({ ...a, headers: { ...a.headers, date: 'not a date' } }));
    await expect(offClock('forged', -6 * MINUTE).checkForUpdates(1)).rejects.toBeInstanceOf(StaleAnswerError);
    s.proxy.rule = null;
    // An answer signed 2 hours ago, served now: its Date is past its expires.
    await fresh('replayed');
    setClock(() => Date.now() - 2 * 3600_000);
    await expect(manager({ app: 'replayed' }).checkForUpdates(1)).rejects.toBeInstanceOf(StaleAnswerError);
    setClock(null);
    // An answer that expired before one already accepted was signed is a replay, whatever the clock.
    const stateDir = s.stateDir();
    fs.writeFileSync(
      path.join(stateDir, 'answers.json'),
      JSON.stringify({ newestCreated: Math.floor(Date.now() / 1000) + 2 * 3600 }),
    );
    await expect(offClock('forged', -6 * MINUTE, { stateDir }).checkForUpdates(1)).rejects.toBeInstanceOf(
      StaleAnswerError,
    );
  });

  it('the CLI: kind clock exits 1 with the offset; a forged Date stays stale, exit 2', async () => {
    await fresh('cliclock');
    const sent = Date.now();
    const slow = await cli(['update', '--app', 'cliclock', '--version-code', '1'], s.stateDir(), pinned, -6 * MINUTE);
    const refused = Date.now();
    expect(slow.code).toBe(1);
    const failure = JSON.parse(slow.stderr.trim()) as { kind: string; error: string; offsetMs: number };
    expect(failure).toMatchObject({
      kind: 'clock',
      error: "this computer's clock is 6 minutes behind; set it and try again",
    });
    expectOffset(failure.offsetMs, -6 * MINUTE, sent, refused);
    tamperChecks((a) => ({ ...a, headers: { ...a.headers, date: new Date(0).toUTCString() } }));
    const stateDir = s.stateDir();
    const forged = await cli(['update', '--app', 'cliclock', '--version-code', '1'], stateDir, pinned, -6 * MINUTE);
    expect(forged.code).toBe(2);
    expect(JSON.parse(forged.stderr.trim())).toMatchObject({ kind: 'stale' });
    expect(downloadsOf(stateDir)).toEqual([]);
    s.proxy.rule = null;
    const right = await cli(['update', '--app', 'cliclock', '--version-code', '1'], s.stateDir());
    expect(right.code).toBe(0);
    expect(JSON.parse(right.stdout.trim())).toMatchObject({ result: 'up-to-date' });
  });
});

describe("the installer's name: the extension of the signed fileName, never a header's", () => {
  it('a Content-Disposition naming a .bat changes nothing: the file is an .exe from the start, and the command says so', async () => {
    s.proxy.rule = async (seen, upstream) => {
      if (!seen.url.startsWith('/api/software/download')) return undefined;
      const answer = await upstream();
      const bat = `attachment; filename="setup-2.bat"; filename*=UTF-8''setup-2.bat`;
      return { ...answer, headers: { ...answer.headers, 'content-disposition': bat } };
    };
    const stateDir = s.stateDir();
    const m = manager({ stateDir });
    const check = await m.checkForUpdates(1);
    expect(check.update).toMatchObject({ versionCode: 2, fileName: 'setup-2.exe' });
    const done = await m.downloadUpdate(check.update!);
    expect(path.basename(done.file)).toBe('tam-launcher-1.2.exe');
    const run = await cli(['update', '--app', 'tam', '--version-code', '1'], s.stateDir());
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout.trim().split('\n').at(-1) ?? '')).toMatchObject({
      file: expect.stringMatching(/tam-launcher-1\.2\.exe$/),
    });
    expect(downloadsOf(stateDir).filter((f) => /\.bat$/i.test(f))).toEqual([]);
  });

  it('a fileName changed in the answer is refused (DigestError; with the digest made anew, SignatureError): nothing downloaded', async () => {
    const rename = (body: Buffer) => Buffer.from(body.toString('utf8').replace('"setup-2.exe"', '"setup-2.bat"'));
    tamperChecks((a) => ({ ...a, body: rename(a.body) }));
    const from = s.proxy.seen.length;
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(DigestError);
    tamperChecks((a) => {
      const body = rename(a.body);
      const { 'content-digest': digest } = signLikeTheService(
        body,
        generateKeyPairSync('ed25519').privateKey,
        'x',
        '/',
      );
      return { ...a, body, headers: { ...a.headers, 'content-digest': digest } };
    });
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(SignatureError);
    expect(downloads(from)).toEqual([]);
  });
});

describe("signed answers bound to their request (TUF's rollback, mix-and-match, freeze)", () => {
  /** Records the service's answer to each check-update request, by `slug` and `versionCode`. */
  const recorded = new Map<string, Answer>();
  const keyOf = (url: string) => {
    const query = new URL(url, 'http://x').searchParams;
    return `${query.get('slug')}:${query.get('versionCode')}`;
  };
  /** Serves the answer recorded for `from` (slug:versionCode) to every check-update of `to`. */
  function serve(to: string, from: string) {
    s.proxy.rule = async (seen, upstream) => {
      if (!isCheck(seen.url)) return undefined;
      return keyOf(seen.url) === to ? recorded.get(from) : upstream();
    };
  }
  async function record(slug: string, versionCode: number) {
    const res = await fetch(`${s.proxy.url}/api/software/check-update?slug=${slug}&versionCode=${versionCode}`, {
      headers: { 'accept-encoding': 'identity' },
    });
    const headers = Object.fromEntries(res.headers);
    recorded.set(`${slug}:${versionCode}`, { status: res.status, headers, body: Buffer.from(await res.arrayBuffer()) });
  }

  beforeAll(async () => {
    const full = await launcherPackage(s.t, 'bind-launcher');
    await publishVersion(s.t, full, 100);
    await publishVersion(s.t, full, 130, { forceUpdate: true });
    const patch = await launcherPackage(s.t, 'bind-launcher-patch');
    await publishVersion(s.t, patch, 130);
    await publishVersion(s.t, patch, 131);
    await record('bind-launcher', 100);
    await record('bind-launcher', 140);
    await record('bind-launcher', 130);
    await record('bind-launcher-patch', 130);
  });

  it('rollback: the answer recorded for versionCode=100 served to a launcher on 140 is refused, nothing downloaded', async () => {
    serve('bind-launcher:140', 'bind-launcher:100');
    const stateDir = s.stateDir();
    const from = s.proxy.seen.length;
    await expect(manager({ app: 'bind', stateDir }).checkForUpdates(140)).rejects.toThrow(SignatureError);
    expect(downloads(from)).toEqual([]);
    expect(downloadsOf(stateDir)).toEqual([]);
  });

  it('freeze: a fresh answer for versionCode=130 served to a launcher on 100 is refused (it hides a forced update)', async () => {
    serve('bind-launcher:100', 'bind-launcher:130');
    await expect(manager({ app: 'bind' }).checkForUpdates(100)).rejects.toThrow(/does not verify as the answer/);
    s.proxy.rule = null;
    expect(await manager({ app: 'bind' }).checkForUpdates(100)).toMatchObject({
      result: 'mandatory',
      update: { versionCode: 130 },
    });
  });

  it("mix-and-match: the patch package's answer served as the full package's, and the other way, are refused", async () => {
    serve('bind-launcher:130', 'bind-launcher-patch:130');
    await expect(manager({ app: 'bind' }).checkForUpdates(130)).rejects.toThrow(SignatureError);
    serve('bind-launcher-patch:130', 'bind-launcher:100');
    const stateDir = s.stateDir();
    await expect(manager({ app: 'bind', stateDir }).checkForUpdates(130)).rejects.toThrow(SignatureError);
    expect(downloadsOf(stateDir)).toEqual([]);
    s.proxy.rule = null;
    expect(await manager({ app: 'bind' }).checkForUpdates(130)).toMatchObject({
      result: 'patch',
      update: { kind: 'patch', versionCode: 131 },
    });
  });

  it('rollback through a rollout: the answer for a device outside a 10 % rollout served to one inside it (on 1.9.0) is refused', async () => {
    const full = await launcherPackage(s.t, 'roll-launcher');
    await publishVersion(s.t, full, 170);
    await publishVersion(s.t, full, 180, { forceUpdate: true });
    const staged = await publishVersion(s.t, full, 190, { rolloutPercent: 10 });
    const devices = Array.from({ length: 400 }, (_, i) => `device-${i}`);
    const outside = devices.find((d) => bucketOf(staged.id, d) >= 10)!;
    // What the service tells a device outside the rollout, on 1.7.0: mandatory 1.8.0.
    s.proxy.rule = async (seen, upstream) => {
      if (!isCheck(seen.url)) return undefined;
      const answer = await upstream(
        `/api/software/check-update?slug=roll-launcher&versionCode=170&deviceId=${outside}`,
      );
      expect(JSON.parse(answer.body.toString())).toMatchObject({ hasUpdate: true, latest: { versionCode: 180 } });
      return answer;
    };
    const stateDir = s.stateDir();
    await expect(manager({ app: 'roll', stateDir }).checkForUpdates(190)).rejects.toBeInstanceOf(SignatureError);
    expect(downloadsOf(stateDir)).toEqual([]);
  });

  it("an offer not above the launcher's own version, even signed by a trusted key for this very request, is a RollbackError: exit 2, nothing downloaded", async () => {
    // A trusted key that signs what it is given (a service that went wrong, or a stolen key).
    const rogue = generateKeyPairSync('ed25519');
    const raw = Buffer.from(rogue.publicKey.export({ format: 'jwk' }).x ?? '', 'base64url').toString('base64');
    const trustedKeys = [...pinned, { keyId: 'rogue', publicKey: raw }];
    let code = 0;
    let downgrade = false;
    s.proxy.rule = async (seen, upstream) => {
      if (!isCheck(seen.url)) return undefined;
      const answer = await upstream();
      const body = JSON.parse(answer.body.toString()) as { latest: { versionCode: number } };
      const offered = Buffer.from(
        JSON.stringify({
          ...body,
          hasUpdate: true,
          forceUpdate: true,
          downgrade,
          latest: { ...body.latest, versionCode: code },
        }),
      );
      return {
        ...answer,
        body: offered,
        headers: { ...answer.headers, ...signLikeTheService(offered, rogue.privateKey, 'rogue', seen.url) },
      };
    };
    const stateDir = s.stateDir();
    for (code of [2, 1]) {
      await expect(manager({ stateDir, trustedKeys }).checkForUpdates(2)).rejects.toBeInstanceOf(RollbackError);
    }
    // The patch package: not above the patch code sent, even with downgrade.
    code = 131;
    downgrade = true;
    await expect(
      manager({ stateDir, trustedKeys, app: 'bind' }).checkUpdate('bind-launcher-patch', 131),
    ).rejects.toThrow(RollbackError);
    // A full package's downgrade (off a revoked version) is an offer below the launcher's own: taken.
    code = 1;
    expect(await manager({ stateDir, trustedKeys }).checkForUpdates(2)).toMatchObject({ result: 'mandatory' });
    downgrade = false;
    code = 2;
    const run = await cli(['update', '--app', 'tam', '--version-code', '2'], stateDir, trustedKeys);
    expect(run.code).toBe(2);
    expect(JSON.parse(run.stderr.trim())).toMatchObject({
      kind: 'rollback',
      error: expect.stringContaining('rollback'),
    });
    expect(downloadsOf(stateDir)).toEqual([]);
  });

  it('an endless answer (1,500 MiB chunked, no digest) is refused early, memory flat', async () => {
    const chunk = Buffer.alloc(1024 * 1024, 'x');
    let sent = 0;
    s.proxy.rule = (seen) =>
      isCheck(seen.url)
        ? {
            status: 200,
            headers: { 'content-type': 'application/json' },
            body: Buffer.alloc(0),
            stream: async function* () {
              for (; sent < 1500; sent++) yield chunk;
            },
          }
        : undefined;
    const before = process.memoryUsage().rss;
    const started = Date.now();
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(AnswerTooLargeError);
    expect(Date.now() - started).toBeLessThan(5000);
    expect(sent).toBeLessThan(100);
    expect(process.memoryUsage().rss - before).toBeLessThan(200 * 1024 * 1024);
  });

  it('a silent server: each attempt ends at timeoutMs (retries included), and the caller can abort', async () => {
    s.proxy.rule = (seen) => (isCheck(seen.url) ? new Promise<never>(() => undefined) : undefined);
    const started = Date.now();
    const m = manager({ timeoutMs: 300, retry: { retries: 1, baseDelayMs: 10 } });
    await expect(m.checkForUpdates(1)).rejects.toThrow(NetworkError);
    expect(Date.now() - started).toBeGreaterThanOrEqual(600);
    expect(Date.now() - started).toBeLessThan(3000);
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('the user closed the launcher')), 200);
    const aborted = Date.now();
    await expect(manager().checkForUpdates(1, 1, controller.signal)).rejects.toBeInstanceOf(AbortedError);
    expect(Date.now() - aborted).toBeLessThan(2000);
    await expect(manager().checkAddons([], AbortSignal.abort())).rejects.toBeInstanceOf(AbortedError);
    await expect(manager().releaseByHash('0'.repeat(64), AbortSignal.abort())).rejects.toBeInstanceOf(AbortedError);
  });
});

const onPostgres = ENGINE === 'postgres' ? describe : describe.skip;

onPostgres('two instances on one PostgreSQL database behind one balancer (no attack)', () => {
  let twin: Awaited<ReturnType<typeof startTwin>>;
  beforeAll(async () => {
    twin = await startTwin(s.t);
    const full = await launcherPackage(s.t, 'lb-launcher');
    await publishVersion(s.t, full, 1);
    await publishVersion(s.t, full, 2);
  });
  afterAll(() => twin.close());

  it('a genuine answer from instance 1 is accepted after instance 2 signed a newer one, and the other way', async () => {
    // Requests go to the instance `to` names; each keeps and signs its own answers.
    let to: 'one' | 'two' = 'one';
    s.proxy.rule = (seen, upstream) => (to === 'one' ? upstream() : forward(new URL(twin.url), seen));
    const stateDir = s.stateDir();
    const check = () => manager({ app: 'lb', stateDir }).checkForUpdates(1);
    const created = async () => {
      const res = await fetch(`${s.proxy.url}/api/software/check-update?slug=lb-launcher&versionCode=1`);
      return Number(/;created=(\d+);/.exec(res.headers.get('signature-input') ?? '')?.[1]);
    };
    expect(await check()).toMatchObject({ result: 'up-to-date', optional: { versionCode: 2 } });
    const first = await created();
    // Two minutes later instance 2 signs the same answer anew.
    setClock(() => Date.now() + 120_000);
    to = 'two';
    expect(await check()).toMatchObject({ optional: { versionCode: 2 } });
    expect(await created()).toBeGreaterThan(first + 100);
    // Instance 1's answer, kept and signed earlier, is still genuine: accepted.
    to = 'one';
    expect(await created()).toBe(first);
    expect(await check()).toMatchObject({ optional: { versionCode: 2 } });
    to = 'two';
    expect(await check()).toMatchObject({ optional: { versionCode: 2 } });
  });
});

describe('addon managers', () => {
  let sha256 = '';
  beforeAll(async () => {
    const addon = await admin(s.t, 'POST', '/api/addons', {
      slug: 'questie',
      name: '任务',
      nameEn: 'Questie',
      summary: 's',
    });
    const file = await upload(s.t, 'questie.zip', 'questie bytes');
    sha256 = file.sha256;
    const release = await admin(s.t, 'POST', '/api/releases', {
      addonId: addon.json<{ id: string }>().id,
      version: '1.0',
      downloadType: 'local',
      filePath: file.filePath,
    });
    expect(release.statusCode).toBe(201);
  });

  it('addon updates and by-hash are verified like every answer', async () => {
    const m = manager();
    const updates = await m.checkAddons([{ slug: 'questie', version: '0.9' }, { sha256 }]);
    expect(updates.results.map((r) => r.updateAvailable)).toEqual([true, false]);
    expect((await m.releaseByHash(sha256))?.release.version).toBe('1.0');
    expect(await m.releaseByHash('0'.repeat(64))).toBeNull();

    s.proxy.rule = async (seen, upstream) => {
      if (!seen.url.startsWith('/api/addons/updates') && !seen.url.startsWith('/api/releases/by-hash'))
        return undefined;
      const answer = await upstream();
      const body = Buffer.from(answer.body.toString().replace('1.0', '6.6'));
      return { ...answer, body };
    };
    await expect(m.checkAddons([{ slug: 'questie', version: '0.9' }])).rejects.toBeInstanceOf(DigestError);
    await expect(m.releaseByHash(sha256)).rejects.toBeInstanceOf(DigestError);
  });

  it("an addon's download has the same deadlines: a drip fails each attempt at the speed floor's window", async () => {
    const m = manager({ stallTimeoutMs: 300, retry: { retries: 1, baseDelayMs: 10 } });
    const release = (await m.addon('questie'))!.releases[0]!;
    s.proxy.rule = (seen) =>
      seen.url.startsWith('/api/download/')
        ? {
            status: 200,
            headers: {},
            body: Buffer.alloc(0),
            stream: async function* () {
              for (;;) {
                yield Buffer.from('x');
                await sleep(100);
              }
            },
          }
        : undefined;
    const from = s.proxy.seen.length;
    const started = Date.now();
    await expect(m.downloadRelease('questie', release)).rejects.toThrow(/fewer than 308 bytes in 300 ms/);
    expect(s.proxy.seen.slice(from).filter((r) => r.url.startsWith('/api/download/'))).toHaveLength(2);
    expect(Date.now() - started).toBeGreaterThanOrEqual(600);
    expect(Date.now() - started).toBeLessThan(600 + 1000);
  });
});
