import { WasteError } from '../util/errors.js';
import { kimiChunks, kimiPattern } from './pattern.js';

/**
 * Byte-level BPE training for tiktoken-style rank files. Text is cut exactly as TiktokenTokenizer
 * cuts it before merging (Kimi's long-run cuts, then Kimi's pattern), so every merge is learned
 * inside the pieces the encoder will see. Ranks 0..255 are the single bytes in byte order; then
 * each merge of the most frequent adjacent pair adds the concatenated bytes as the next rank.
 *
 * Ties (equal counts) go to the pair with the lower (left rank, right rank), so the same texts
 * always give the same ranks, whatever order the distinct pieces were met in. A pair whose bytes
 * are already a token (reached earlier by another split, e.g. "ab"+"c" then "a"+"bc") is merged
 * into that token without adding a rank: a rank file gives each byte string one rank.
 *
 * Incremental: pair counts live in a map, the best pair comes off a max-heap whose stale entries
 * are skipped, and an index from pair to the pieces holding it means a merge only rewrites the
 * pieces it touches. Returns fewer ranks than asked only when the text runs out of pairs.
 */
export interface TrainOptions {
  /** How many ranks to learn, the 256 single bytes included. */
  ranks: number;
  /** Called every few merges and at the end: ranks so far, ranks asked for. */
  onProgress?(done: number, total: number): void;
}

export function trainBpe(texts: Iterable<string>, opts: TrainOptions): Uint8Array[] {
  const R = opts.ranks;
  if (!Number.isInteger(R) || R < 256) throw new WasteError('E_ARG', `a byte-level BPE needs at least 256 ranks (one per byte), not ${R}`);
  const tokens: Uint8Array[] = [];
  const byBytes = new Map<string, number>();
  for (let b = 0; b < 256; b++) {
    tokens.push(Uint8Array.of(b));
    byBytes.set(String.fromCharCode(b), b);
  }
  const words = Words.fromCounts(countPieces(texts), R);
  let reported = 0;
  while (tokens.length < R) {
    const best = words.best();
    if (!best) break;
    const [a, b] = best;
    const bytes = new Uint8Array(tokens[a].length + tokens[b].length);
    bytes.set(tokens[a]);
    bytes.set(tokens[b], tokens[a].length);
    const key = Buffer.from(bytes).toString('latin1');
    let c = byBytes.get(key);
    if (c === undefined) {
      c = tokens.length;
      tokens.push(bytes);
      byBytes.set(key, c);
    }
    words.merge(a, b, c);
    if (opts.onProgress && tokens.length - reported >= 64) {
      reported = tokens.length;
      opts.onProgress(tokens.length, R);
    }
  }
  opts.onProgress?.(tokens.length, R);
  return tokens;
}

/** How often each piece of the pre-tokenized texts occurs. */
function countPieces(texts: Iterable<string>): Map<string, number> {
  const pattern = kimiPattern();
  const counts = new Map<string, number>();
  for (const text of texts)
    for (const chunk of kimiChunks(text))
      for (const m of chunk.matchAll(pattern)) counts.set(m[0], (counts.get(m[0]) ?? 0) + 1);
  return counts;
}

/**
 * The distinct pieces as symbol sequences (ranks), with their frequencies, the count of every
 * adjacent pair weighted by frequency, and where each pair occurs. A pair (a, b) is keyed
 * a * R + b: a number that orders pairs by left then right rank, which the tie-break relies on.
 */
class Words {
  private readonly pairs = new Map<number, number>();
  /** Pieces that hold each pair; may list a piece twice or after it lost the pair (checked on use). */
  private readonly where = new Map<number, number[]>();
  private readonly heap = new PairHeap();
  private readonly seen: Int32Array;
  private stamp = 0;

  private constructor(
    private readonly syms: Int32Array[],
    private readonly lens: Int32Array,
    private readonly freq: Float64Array,
    private readonly R: number,
  ) {
    this.seen = new Int32Array(syms.length);
    for (let w = 0; w < syms.length; w++) {
      const s = syms[w];
      for (let i = 0; i + 1 < lens[w]; i++) {
        const p = s[i] * R + s[i + 1];
        this.pairs.set(p, (this.pairs.get(p) ?? 0) + freq[w]);
        this.index(p, w);
      }
    }
    for (const [p, n] of this.pairs) this.heap.push(n, p);
  }

  static fromCounts(counts: Map<string, number>, R: number): Words {
    const enc = new TextEncoder();
    const syms: Int32Array[] = [];
    const lens = new Int32Array(counts.size);
    const freq = new Float64Array(counts.size);
    let w = 0;
    for (const [piece, n] of counts) {
      const bytes = enc.encode(piece);
      syms.push(Int32Array.from(bytes));
      lens[w] = bytes.length;
      freq[w++] = n;
    }
    return new Words(syms, lens, freq, R);
  }

  /** The most frequent pair (lowest ranks on a tie), or undefined when no piece has two symbols. */
  best(): [number, number] | undefined {
    for (;;) {
      const top = this.heap.pop();
      if (!top) return undefined;
      const [n, p] = top;
      if (this.pairs.get(p) === n) return [Math.floor(p / this.R), p % this.R];
      // stale: the count changed after this entry was queued, and the current count was queued too
    }
  }

  /** Rewrites every piece holding (a, b) with c in its place, updating counts, index and heap. */
  merge(a: number, b: number, c: number): void {
    const R = this.R;
    const key = a * R + b;
    const list = this.where.get(key) ?? [];
    // a merge only creates pairs that involve c, and c is longer than a and b: (a, b) never comes back
    this.where.delete(key);
    const before = new Map<number, number>();
    const bump = (p: number, d: number) => {
      const old = this.pairs.get(p) ?? 0;
      if (!before.has(p)) before.set(p, old);
      if (old + d === 0) this.pairs.delete(p);
      else this.pairs.set(p, old + d);
    };
    this.stamp++;
    for (const w of list) {
      if (this.seen[w] === this.stamp) continue;
      this.seen[w] = this.stamp;
      const s = this.syms[w];
      const len = this.lens[w];
      let at = -1;
      for (let i = 0; i + 1 < len; i++)
        if (s[i] === a && s[i + 1] === b) {
          at = i;
          break;
        }
      if (at < 0) continue;
      // pieces are short: recounting the whole piece is simpler than patching around each
      // occurrence, and right when occurrences overlap ("aaa" merging (a, a))
      const f = this.freq[w];
      for (let i = 0; i + 1 < len; i++) bump(s[i] * R + s[i + 1], -f);
      let j = at;
      for (let i = at; i < len; ) {
        if (i + 1 < len && s[i] === a && s[i + 1] === b) {
          s[j++] = c;
          i += 2;
        } else s[j++] = s[i++];
      }
      this.lens[w] = j;
      for (let i = 0; i + 1 < j; i++) {
        const p = s[i] * R + s[i + 1];
        bump(p, f);
        if (s[i] === c || s[i + 1] === c) this.index(p, w);
      }
    }
    for (const [p, old] of before) {
      const now = this.pairs.get(p) ?? 0;
      if (now !== old && now > 0) this.heap.push(now, p);
    }
  }

  private index(p: number, w: number): void {
    const l = this.where.get(p);
    if (l) l.push(w);
    else this.where.set(p, [w]);
  }
}

/** A binary max-heap of (count, pair key): highest count first, then lowest key. */
class PairHeap {
  private readonly count: number[] = [];
  private readonly key: number[] = [];

  private above(i: number, j: number): boolean {
    return this.count[i] > this.count[j] || (this.count[i] === this.count[j] && this.key[i] < this.key[j]);
  }

  private swap(i: number, j: number): void {
    [this.count[i], this.count[j]] = [this.count[j], this.count[i]];
    [this.key[i], this.key[j]] = [this.key[j], this.key[i]];
  }

  push(count: number, key: number): void {
    this.count.push(count);
    this.key.push(key);
    for (let i = this.count.length - 1; i > 0; ) {
      const p = (i - 1) >> 1;
      if (!this.above(i, p)) break;
      this.swap(i, p);
      i = p;
    }
  }

  pop(): [number, number] | undefined {
    const n = this.count.length;
    if (!n) return undefined;
    const top: [number, number] = [this.count[0], this.key[0]];
    this.swap(0, n - 1);
    this.count.pop();
    this.key.pop();
    for (let i = 0; ; ) {
      const l = 2 * i + 1;
      let m = i;
      if (l < n - 1 && this.above(l, m)) m = l;
      if (l + 1 < n - 1 && this.above(l + 1, m)) m = l + 1;
      if (m === i) break;
      this.swap(i, m);
      i = m;
    }
    return top;
  }
}
