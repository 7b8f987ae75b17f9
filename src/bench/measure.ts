/** Timing helpers for benchmarks: best-of-N wall time of a repeated call. */
export function timeIt(fn: () => void, minSeconds = 0.2, passes = 3): number {
  fn(); // warm up: page faults, tier-up
  let best = Infinity;
  for (let p = 0; p < passes; p++) {
    let calls = 0;
    const t0 = process.hrtime.bigint();
    let elapsed = 0;
    do {
      fn();
      calls++;
      elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
    } while (elapsed < minSeconds);
    best = Math.min(best, elapsed / calls);
  }
  return best;
}

export function table(rows: (string | number)[][], header: string[]): string {
  const cells = [header, ...rows.map((r) => r.map(String))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => r[i].length)));
  return cells.map((r) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ')).join('\n') + '\n';
}

/** The median (the mean of the middle two for an even count). */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}
