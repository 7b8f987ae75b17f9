/**
 * Stop strings, matched on the text as it streams: a stop string can straddle tokens, so text is
 * held back while its tail could still be the start of one. When one appears, the text before it
 * is released and the rest dropped.
 */
export class StopMatcher {
  private pending = '';
  private stopped = false;
  /** The stop string that ended the text, once one has. */
  matched: string | undefined;

  constructor(private readonly stops: readonly string[]) {}

  get done(): boolean {
    return this.stopped;
  }

  /** Add a piece; returns the text that is now safe to show. */
  push(piece: string): string {
    if (this.stopped) return '';
    this.pending += piece;
    if (!this.stops.length) {
      const out = this.pending;
      this.pending = '';
      return out;
    }
    let cut = -1;
    for (const s of this.stops) {
      const at = this.pending.indexOf(s);
      if (at >= 0 && (cut < 0 || at < cut)) {
        cut = at;
        this.matched = s;
      }
    }
    if (cut >= 0) {
      this.stopped = true;
      const out = this.pending.slice(0, cut);
      this.pending = '';
      return out;
    }
    // keep the longest tail that is a prefix of some stop string
    let keep = 0;
    for (const s of this.stops)
      for (let n = Math.min(s.length - 1, this.pending.length); n > keep; n--)
        if (this.pending.endsWith(s.slice(0, n))) {
          keep = n;
          break;
        }
    const out = this.pending.slice(0, this.pending.length - keep);
    this.pending = this.pending.slice(this.pending.length - keep);
    return out;
  }

  /** At the end: whatever was held back (it did not turn into a stop string). */
  flush(): string {
    const out = this.stopped ? '' : this.pending;
    this.pending = '';
    return out;
  }
}
