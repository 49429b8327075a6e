/**
 * A bigram index over the catalogue's search texts: for each two-character piece, the entries whose
 * text holds it (ascending positions). A term's candidates are the entries holding its rarest
 * piece; each candidate is then checked with `includes`, so results are exactly the substring
 * rule's, in Chinese as in English, while a search looks at a few hundred entries instead of all.
 * One-character terms have no piece and are checked against every entry.
 */
export class BigramIndex {
  private readonly postings = new Map<string, Int32Array>();

  constructor(private readonly texts: readonly string[]) {
    // Two passes over the texts (count, then fill one shared array) instead of growing a list per
    // piece: at 100,000 addons that list-of-numbers stage alone held some 250 MB for a moment.
    const counts = new Map<string, number>();
    this.eachPiece((piece) => counts.set(piece, (counts.get(piece) ?? 0) + 1));
    const all = new Int32Array([...counts.values()].reduce((a, n) => a + n, 0));
    const filled = new Map<string, number>();
    let start = 0;
    for (const [piece, n] of counts) {
      this.postings.set(piece, all.subarray(start, start + n));
      filled.set(piece, 0);
      start += n;
    }
    this.eachPiece((piece, position) => {
      const at = filled.get(piece) as number;
      (this.postings.get(piece) as Int32Array)[at] = position;
      filled.set(piece, at + 1);
    });
  }

  /** Calls `visit` once per distinct two-character piece of each text, texts in order. */
  private eachPiece(visit: (piece: string, position: number) => void): void {
    const seen = new Set<string>();
    this.texts.forEach((text, position) => {
      seen.clear();
      for (let i = 0; i + 2 <= text.length; i += 1) {
        const piece = text.slice(i, i + 2);
        if (seen.has(piece)) continue;
        seen.add(piece);
        visit(piece, position);
      }
    });
  }

  /** Positions (ascending) whose text contains every term. */
  matching(terms: readonly string[]): number[] {
    if (terms.length === 0) return this.texts.map((_, i) => i);
    // The term with the rarest piece narrows the candidates; every term is then checked in full.
    let best: Int32Array | null = null;
    for (const term of terms) {
      for (let i = 0; i + 2 <= term.length; i += 1) {
        const list = this.postings.get(term.slice(i, i + 2));
        if (list === undefined) return [];
        if (best === null || list.length < best.length) best = list;
      }
    }
    const out: number[] = [];
    const check = (position: number) => {
      const text = this.texts[position] as string;
      if (terms.every((term) => text.includes(term))) out.push(position);
    };
    if (best === null) this.texts.forEach((_, i) => check(i));
    else for (const position of best) check(position);
    return out;
  }
}

/** What relevance looks at: an entry's names (both languages, normalised) and its whole search text. */
export interface Rankable {
  readonly names: readonly string[];
  readonly searchText: string;
}

/**
 * Relevance of an entry to search terms (higher first), the sum over terms of: 100 when a name is
 * the term, 50 when a name starts with it, 20 when a name holds it, 5 when only the summary does.
 */
export function relevance(entry: Rankable, terms: readonly string[]): number {
  let score = 0;
  for (const term of terms) {
    if (entry.names.some((n) => n === term)) score += 100;
    else if (entry.names.some((n) => n.startsWith(term))) score += 50;
    else if (entry.names.some((n) => n.includes(term))) score += 20;
    else if (entry.searchText.includes(term)) score += 5;
  }
  return score;
}
