import { describe, expect, it } from 'vitest';
import { storedFile } from '../src/tus.js';

const failure = (status: number) => Object.assign(new Error(`status ${status}`), { status });

describe('storedFile: the GET of a finished upload', () => {
  it('asks again while the service answers 503 (its store failing for now), then answers the file', async () => {
    let calls = 0;
    const started = Date.now();
    const stored = await storedFile(async () => {
      calls += 1;
      if (calls === 1) throw failure(503);
      return { filePath: '/uploads/x.exe' };
    });
    expect(stored).toEqual({ filePath: '/uploads/x.exe' });
    expect(calls).toBe(2);
    // The first pause: 2 s.
    expect(Date.now() - started).toBeGreaterThanOrEqual(1900);
  });

  it('gives up at once on any other error', async () => {
    let calls = 0;
    await expect(
      storedFile(async () => {
        calls += 1;
        throw failure(404);
      }),
    ).rejects.toThrow('status 404');
    expect(calls).toBe(1);
  });
});
