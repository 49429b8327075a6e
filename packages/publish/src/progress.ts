/** Upload progress on stderr: a redrawn bar on a terminal, plain lines (every 10 %) otherwise. */

export type Progress = (sent: number, total: number) => void;

const MiB = 1024 * 1024;
const mib = (bytes: number) => (bytes / MiB).toFixed(1);

export function progressReporter(
  out: NodeJS.WritableStream & { isTTY?: boolean },
  label: string,
): Progress & { done(): void } {
  let lastTenth = -1;
  let drawn = false;
  const report = (sent: number, total: number) => {
    const fraction = total > 0 ? sent / total : 1;
    if (out.isTTY) {
      const width = 30;
      const filled = Math.round(fraction * width);
      out.write(
        `\r${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(fraction * 100).toFixed(0).padStart(3)}% ${mib(sent)}/${mib(total)} MiB`,
      );
      drawn = true;
      return;
    }
    const tenth = Math.floor(fraction * 10);
    if (tenth === lastTenth) return;
    lastTenth = tenth;
    out.write(`${label}: ${tenth * 10}% (${sent} of ${total} bytes)\n`);
  };
  return Object.assign(report, {
    done() {
      if (drawn) out.write('\n');
    },
  });
}
