/**
 * Byte-pair encoding by rank, as tiktoken does it: start from single bytes and repeatedly merge the
 * adjacent pair whose concatenation has the lowest rank (the leftmost on a tie) until no pair has
 * a rank. Short pieces use a plain scan; long ones (a run of symbols, a long word) a heap, so a
 * 25,000-character piece costs n log n, not n².
 *
 * `piece` is the piece's bytes as a latin1 string; `out` receives the ranks.
 */
export function bytePairEncode(piece: string, ranks: Map<string, number>, out: number[]): void {
  const whole = ranks.get(piece);
  if (whole !== undefined) {
    out.push(whole);
    return;
  }
  if (piece.length <= 64) scanMerge(piece, ranks, out);
  else heapMerge(piece, ranks, out);
}

const NONE = Number.MAX_SAFE_INTEGER;

function scanMerge(piece: string, ranks: Map<string, number>, out: number[]): void {
  const n = piece.length;
  // starts[i] is the start of part i; parts end where the next starts
  const starts: number[] = [];
  for (let i = 0; i <= n; i++) starts.push(i);
  const pairRank = (i: number): number => (i + 2 < starts.length ? (ranks.get(piece.slice(starts[i], starts[i + 2])) ?? NONE) : NONE);
  const r: number[] = [];
  for (let i = 0; i < n - 1; i++) r.push(pairRank(i));
  r.push(NONE);
  for (;;) {
    let best = NONE;
    let at = -1;
    for (let i = 0; i < r.length - 1; i++)
      if (r[i] < best) {
        best = r[i];
        at = i;
      }
    if (at < 0) break;
    starts.splice(at + 1, 1);
    r.splice(at + 1, 1);
    r[at] = pairRank(at);
    if (at > 0) r[at - 1] = pairRank(at - 1);
  }
  for (let i = 0; i + 1 < starts.length; i++) out.push(ranks.get(piece.slice(starts[i], starts[i + 1]))!);
}

function heapMerge(piece: string, ranks: Map<string, number>, out: number[]): void {
  const n = piece.length;
  // parts as a linked list over their start offsets: next[s] is the start of the following part
  const next = new Int32Array(n + 1);
  const prev = new Int32Array(n + 1);
  const alive = new Uint8Array(n + 1);
  for (let i = 0; i <= n; i++) {
    next[i] = i + 1;
    prev[i] = i - 1;
    alive[i] = 1;
  }
  // heap of candidate merges (rank, left start, right end); stale entries are skipped when popped
  const heap = new MergeHeap();
  const push = (s: number) => {
    const m = next[s];
    if (m >= n) return;
    const e = next[m];
    const rank = ranks.get(piece.slice(s, e));
    if (rank !== undefined) heap.push(rank, s, e);
  };
  for (let s = 0; s < n - 1; s++) push(s);
  while (heap.size) {
    const [, s, e] = heap.pop();
    const m = next[s];
    if (!alive[s] || m >= n || next[m] !== e) continue; // the pair changed since it was queued
    alive[m] = 0;
    next[s] = e;
    prev[e] = s;
    push(s);
    if (prev[s] >= 0) push(prev[s]);
  }
  for (let s = 0; s < n; s = next[s]) out.push(ranks.get(piece.slice(s, next[s]))!);
}

/** A binary min-heap of (rank, start, end), ordered by rank then start: the leftmost lowest. */
class MergeHeap {
  private rank: number[] = [];
  private start: number[] = [];
  private end: number[] = [];

  get size(): number {
    return this.rank.length;
  }

  private less(i: number, j: number): boolean {
    return this.rank[i] < this.rank[j] || (this.rank[i] === this.rank[j] && this.start[i] < this.start[j]);
  }

  private swap(i: number, j: number): void {
    [this.rank[i], this.rank[j]] = [this.rank[j], this.rank[i]];
    [this.start[i], this.start[j]] = [this.start[j], this.start[i]];
    [this.end[i], this.end[j]] = [this.end[j], this.end[i]];
  }

  push(rank: number, start: number, end: number): void {
    this.rank.push(rank);
    this.start.push(start);
    this.end.push(end);
    let i = this.rank.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(i, p)) break;
      this.swap(i, p);
      i = p;
    }
  }

  pop(): [number, number, number] {
    const top: [number, number, number] = [this.rank[0], this.start[0], this.end[0]];
    const last = this.rank.length - 1;
    this.swap(0, last);
    this.rank.pop();
    this.start.pop();
    this.end.pop();
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < this.rank.length && this.less(l, m)) m = l;
      if (r < this.rank.length && this.less(r, m)) m = r;
      if (m === i) break;
      this.swap(i, m);
      i = m;
    }
    return top;
  }
}
