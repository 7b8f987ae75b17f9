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
    const amount = `${pct}%  ${this.format(done)}/${this.format(this.total)}`;
    const note = this.note ? `  ${this.note}` : '';
    const tail = `${amount}  ${fmtSeconds(elapsed)} elapsed${eta ? `, ${fmtSeconds(eta)} left` : ''}${note}`;
    // on a narrow terminal the time left (or elapsed) alone
    const short = `${amount}  ${eta ? `${fmtSeconds(eta)} left` : fmtSeconds(elapsed)}${note}`;
    if (this.tty) this.stream.write(`\r${barLine(this.label, frac, [tail, short], this.stream.columns)}\x1b[K`);
    else this.stream.write(`${this.label}: ${tail}\n`);
  }

  /** A line of its own while the bar is up: the bar's line is cleared first, and the next update redraws it below. */
  print(line: string): void {
    if (this.tty && this.lastDraw) this.stream.write('\r\x1b[K');
    this.stream.write(`${line}\n`);
  }

  done(message?: string): void {
    if (this.quiet) return;
    if (this.tty) this.stream.write('\r\x1b[K');
    if (message) this.stream.write(`${message}\n`);
  }
}

/**
 * One redraw of a bar, fitted to a terminal `columns` wide: a line the terminal wraps is not
 * overwritten by the next `\r` but scrolls it off (a 15 s pull on 80 columns printed 98 lines).
 * The first of `texts` (longest first) that fits beside a full bar is taken; else the last, the
 * bar narrowed, and then its end (what is being worked on) cut. The last column stays free: some
 * terminals wrap as soon as it is written.
 */
export function barLine(label: string, frac: number, texts: string[], columns = 80): string {
  const room = columns > 1 ? columns - 1 : 79;
  const bar = (width: number, text: string) => {
    const fill = Math.round(frac * width);
    return [...`${label} [${'#'.repeat(fill)}${'.'.repeat(width - fill)}] ${text}`];
  };
  for (const text of texts) {
    const line = bar(BAR_WIDTH, text);
    if (line.length <= room) return line.join('');
  }
  const text = texts[texts.length - 1];
  const line = bar(Math.max(MIN_BAR_WIDTH, Math.min(BAR_WIDTH, room - bar(0, text).length)), text);
  return line.length <= room ? line.join('') : `${line.slice(0, room - 1).join('')}…`;
}

const BAR_WIDTH = 24;
const MIN_BAR_WIDTH = 8;

export function fmtSeconds(s: number): string {
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}
