import { describe, expect, expectTypeOf, it } from 'vitest';
// The package's public names.
import * as client from '../src/index.js';

describe('the error classes', () => {
  it.each([
    ['SignatureError', client.SignatureError, 'signature', true],
    ['DigestError', client.DigestError, 'digest', true],
    ['StaleAnswerError', client.StaleAnswerError, 'stale', true],
    ['IntegrityError', client.IntegrityError, 'integrity', true],
    ['PublisherSignatureError', client.PublisherSignatureError, 'publisher-signature', true],
    ['NetworkError', client.NetworkError, 'network', false],
    ['AbortedError', client.AbortedError, 'aborted', false],
    ['StateError', client.StateError, 'state', false],
  ] as const)('%s: its name and kind, a LauncherClientError', (name, Class, kind, verification) => {
    const cause = new Error('underneath');
    const err = new Class('what happened', { cause });
    expect(err).toBeInstanceOf(Class);
    expect(err).toBeInstanceOf(client.LauncherClientError);
    expect(err).toBeInstanceOf(Error);
    expect(err).toMatchObject({ name, kind, verification, message: 'what happened', cause });
    expect(String(err)).toBe(`${name}: what happened`);
    // Each class is its own: none is an instance of another.
    expect(err instanceof (Class === client.SignatureError ? client.DigestError : client.SignatureError)).toBe(false);
  });

  it('HttpError carries the status, URL, server message and Retry-After', () => {
    const err = new client.HttpError(503, 'http://127.0.0.1/x', 'busy', 2000);
    expect(err).toBeInstanceOf(client.LauncherClientError);
    expect(err).toMatchObject({
      name: 'HttpError',
      kind: 'http',
      verification: false,
      status: 503,
      url: 'http://127.0.0.1/x',
      serverMessage: 'busy',
      retryAfterMs: 2000,
      message: 'http://127.0.0.1/x answered 503: busy',
    });
    expect(new client.HttpError(404, 'http://127.0.0.1/y', null)).toMatchObject({
      message: 'http://127.0.0.1/y answered 404',
      retryAfterMs: null,
    });
  });

  it('ClockError is no verification failure: it carries the offset and a sentence to show, rounded', () => {
    const err = new client.ClockError(-6 * 60_000 + 400);
    expect(err).toBeInstanceOf(client.LauncherClientError);
    expect(err).toMatchObject({
      name: 'ClockError',
      kind: 'clock',
      verification: false,
      offsetMs: -359_600,
      message: "this computer's clock is 6 minutes behind; set it and try again",
    });
    const said = (ms: number) => /clock is (.*); set it/.exec(new client.ClockError(ms).message)?.[1];
    expect(said(3_600_000)).toBe('1 hour ahead');
    expect(said(-5 * 60_000)).toBe('5 minutes behind');
    expect(said(89 * 60_000)).toBe('1 hour ahead');
    expect(said(-26 * 3_600_000)).toBe('26 hours behind');
    expect(said(3 * 86_400_000 + 1000)).toBe('3 days ahead');
    expect(said(60_000)).toBe('1 minute ahead');
  });

  it('BusyError, UnsafePathError, BlockedError and InUseError: no verification failures, with the fields a launcher acts on', () => {
    const busy = new client.BusyError({ pid: 4242, operation: 'game-update', since: '2026-12-05T10:00:00.000Z' });
    expect(busy).toMatchObject({ name: 'BusyError', kind: 'busy', verification: false, pid: 4242 });
    expect(busy.message).toMatch(/pid 4242\) is running game-update/);
    expect(busy.details).toEqual({ pid: 4242, operation: 'game-update', since: '2026-12-05T10:00:00.000Z' });
    const unsafe = new client.UnsafePathError('Data', 'is a symbolic link or junction');
    expect(unsafe).toMatchObject({ name: 'UnsafePathError', kind: 'unsafe-path', verification: false, path: 'Data' });
    expect(unsafe.details).toEqual({ path: 'Data' });
    const blocked = new client.BlockedError(['old.dll'], { repaired: ['WoW.exe'], removed: [] });
    expect(blocked).toMatchObject({ name: 'BlockedError', kind: 'blocked', verification: false, paths: ['old.dll'] });
    expect(blocked.details).toEqual({ paths: ['old.dll'], repaired: ['WoW.exe'], removed: [] });
    const inUse = new client.InUseError(['WoW.exe', 'Data/common.MPQ']);
    expect(inUse).toMatchObject({ name: 'InUseError', kind: 'in-use', verification: false });
    expect(inUse.message).toMatch(/^WoW\.exe, Data\/common\.MPQ are in use by another program/);
    expect(inUse.details).toEqual({ paths: ['WoW.exe', 'Data/common.MPQ'] });
    expect(new client.BlockedError(['a', 'b']).details).toEqual({ paths: ['a', 'b'] });
    expect(new client.StateError('x').details).toEqual({});
  });

  it('names and kinds are literal types a program can switch on', () => {
    expectTypeOf(new client.SignatureError('x').kind).toEqualTypeOf<'signature'>();
    expectTypeOf(new client.SignatureError('x').name).toEqualTypeOf<'SignatureError'>();
    expectTypeOf(new client.HttpError(500, 'u', null).kind).toEqualTypeOf<'http'>();
    expectTypeOf<client.StateError>().toMatchTypeOf<client.LauncherClientError>();
  });
});
