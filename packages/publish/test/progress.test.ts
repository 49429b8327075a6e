import { describe, expect, it } from 'vitest';
import { progressReporter } from '../src/progress.js';

function sink(isTTY: boolean) {
  const stream = { isTTY, text: '', write: (s: string) => ((stream.text += s), true) };
  return stream;
}

describe('upload progress', () => {
  it('redraws one bar on a terminal', () => {
    const out = sink(true);
    const report = progressReporter(out as unknown as NodeJS.WritableStream & { isTTY: boolean }, 'upload a.exe');
    report(0, 4 * 1024 * 1024);
    report(2 * 1024 * 1024, 4 * 1024 * 1024);
    report.done();
    expect(out.text).toBe(
      '\rupload a.exe [..............................]   0% 0.0/4.0 MiB' +
        '\rupload a.exe [###############...............]  50% 2.0/4.0 MiB\n',
    );
  });

  it('writes a plain line every 10 % elsewhere (CI logs)', () => {
    const out = sink(false);
    const report = progressReporter(out as unknown as NodeJS.WritableStream, 'upload a.exe');
    for (let sent = 0; sent <= 1000; sent += 25) report(sent, 1000);
    report.done();
    const lines = out.text.trim().split('\n');
    expect(lines).toHaveLength(11);
    expect(lines[0]).toBe('upload a.exe: 0% (0 of 1000 bytes)');
    expect(lines[10]).toBe('upload a.exe: 100% (1000 of 1000 bytes)');
  });
});
