/**
 * A strict reader of the Prometheus text exposition format (version 0.0.4), for tests: every
 * sample line becomes `{name, labels, value}`, `# TYPE` lines give each family's type, and a
 * line that is neither throws (so a malformed scrape fails the test). (The npm parsers looked at
 * flatten labelled histograms into one sample, losing their labels.)
 */
export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Scrape {
  samples: PromSample[];
  types: Map<string, string>;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$/;
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(?:,|$)/y;

function parseLabels(text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  LABEL.lastIndex = 0;
  while (LABEL.lastIndex < text.length) {
    const match = LABEL.exec(text);
    if (!match) throw new Error(`malformed labels in: ${line}`);
    labels[match[1] ?? ''] = (match[2] ?? '').replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
  }
  return labels;
}

export function parsePrometheus(text: string): Scrape {
  const samples: PromSample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const type = /^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$/.exec(line);
    if (type) {
      types.set(type[1] ?? '', type[2] ?? '');
      continue;
    }
    if (line.startsWith('# HELP ')) continue;
    const match = SAMPLE.exec(line);
    if (!match) throw new Error(`not a Prometheus sample line: ${line}`);
    const raw = match[3] ?? '';
    const value = raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw);
    if (Number.isNaN(value) && raw.toLowerCase() !== 'nan') throw new Error(`bad sample value in: ${line}`);
    samples.push({ name: match[1] ?? '', labels: parseLabels(match[2] ?? '', line), value });
  }
  return { samples, types };
}

/** The value of the one sample named `name` whose labels include `labels`; 0 when absent. */
export function valueOf(scrape: Scrape, name: string, labels: Record<string, string> = {}): number {
  const found = scrape.samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`);
  return found[0]?.value ?? 0;
}
