import type { Db } from '../../db/index.js';
import { type DownloadKind, dayOf } from '../downloads/counting.js';

/** The kinds the statistics show (game client manifests are counted per build, not here). */
export const DOWNLOAD_KINDS: readonly Exclude<DownloadKind, 'game'>[] = ['installer', 'launcher', 'addon'];

export interface DownloadDay {
  day: string;
  installer: number;
  launcher: number;
  addon: number;
  total: number;
}

export interface DownloadStats {
  days: number;
  from: string;
  to: string;
  series: DownloadDay[];
  totals: { installer: number; launcher: number; addon: number; total: number };
}

const DAY_MS = 24 * 60 * 60 * 1000;

/** Reads the daily download roll-up that the download path keeps (`download_daily`). */
export class StatsService {
  constructor(private readonly db: Db) {}

  /** Every UTC day of the last `days` days (today included), oldest first, zero days included. */
  async downloads(days: number, now = new Date()): Promise<DownloadStats> {
    const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
    const series: DownloadDay[] = [];
    for (let i = days - 1; i >= 0; i--) {
      series.push({ day: dayOf(new Date(today - i * DAY_MS)), installer: 0, launcher: 0, addon: 0, total: 0 });
    }
    const from = series[0]?.day ?? dayOf(now);
    const to = series[series.length - 1]?.day ?? dayOf(now);
    const rows = await this.db
      .selectFrom('downloadDaily')
      .select(['day', 'kind', 'count'])
      .where('day', '>=', from)
      .where('day', '<=', to)
      .execute();
    const byDay = new Map(series.map((entry) => [entry.day, entry]));
    const totals = { installer: 0, launcher: 0, addon: 0, total: 0 };
    for (const row of rows) {
      const entry = byDay.get(row.day);
      const kind = DOWNLOAD_KINDS.find((k) => k === row.kind);
      if (entry === undefined || kind === undefined) continue;
      const count = Number(row.count);
      entry[kind] += count;
      entry.total += count;
      totals[kind] += count;
      totals.total += count;
    }
    return { days, from, to, series, totals };
  }
}
