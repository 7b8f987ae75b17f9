/**
 * Progress for long jobs on stderr: a bar with rate and ETA on a terminal, a plain line every
 * few seconds otherwise (so logs and CI stay readable). Silent when `quiet`.
 */
export class Progress {
  private readonly start = Date.now();
  private lastDraw = 0;
  private readonly tty: boolean;
  /** Work already done when this run began (a resumed job): the rate counts only this run's. */
  private base: number | undefined;
  /** What is being worked on now, shown after the numbers. */
  note = '';

  constructor(
    private readonly label: string,
    public total: number,
    private readonly quiet = false,
    private readonly stream: NodeJS.WriteStream = process.stderr,
    private readonly format: (n: number) => string = String,
  ) {
    this.tty = Boolean(stream.isTTY);
  }

  update(done: number): void {
    if (this.quiet) return;
    this.base ??= done;
    const now = Date.now();
    const interval = this.tty ? 100 : 5000;
    if (now - this.lastDraw < interval && done < this.total) return;
    // plain lines only for jobs long enough to need them
    if (!this.tty && now - this.start < 2000) return;
    this.lastDraw = now;
    const frac = this.total > 0 ? Math.min(1, done / this.total) : 1;
    const elapsed = (now - this.start) / 1000;
    const rate = elapsed > 0 ? (done - this.base) / elapsed : 0;
    const eta = rate > 0 && frac < 1 ? (this.total - done) / rate : 0;
    const pct = (100 * frac).toFixed(1).padStart(5);
    const tail = `${this.format(done)}/${this.format(this.total)}  ${fmtSeconds(elapsed)} elapsed${eta ? `, ${fmtSeconds(eta)} left` : ''}${this.note ? `  ${this.note}` : ''}`;
    if (this.tty) {
      const width = 24;
      const fill = Math.round(frac * width);
      this.stream.write(`\r${this.label} [${'#'.repeat(fill)}${'.'.repeat(width - fill)}] ${pct}%  ${tail}\x1b[K`);
    } else this.stream.write(`${this.label}: ${pct}%  ${tail}\n`);
  }

  done(message?: string): void {
    if (this.quiet) return;
    if (this.tty) this.stream.write('\r\x1b[K');
    if (message) this.stream.write(`${message}\n`);
  }
}

export function fmtSeconds(s: number): string {
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}
