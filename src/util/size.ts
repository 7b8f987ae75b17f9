import { WasteError, quoted } from './errors.js';

const UNITS: Record<string, number> = { '': 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 };

/**
 * A size as users write it: bytes ("1500000000"), binary units ("512M", "8G", "8GiB", "1.5g"),
 * or a percentage of `total` ("50%"). Returns bytes.
 */
export function parseSize(text: string, total?: number, what = 'size'): number {
  const s = text.trim();
  const pct = /^(\d+(?:\.\d+)?)\s*%$/.exec(s);
  if (pct) {
    if (total === undefined) throw new WasteError('E_ARG', `${what} ${quoted(text)}: a percentage needs a total to be a share of`);
    const p = Number(pct[1]);
    if (!(p > 0 && p <= 100)) throw new WasteError('E_ARG', `${what} ${quoted(text)}: a percentage must be in (0, 100]`);
    return Math.floor((total * p) / 100);
  }
  const m = /^(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?$/i.exec(s);
  if (!m) throw new WasteError('E_ARG', `${what} ${quoted(text)} is not a size (examples: 8G, 512M, 1500000000, 50%)`);
  const n = Number(m[1]) * UNITS[m[2].toLowerCase()];
  if (!Number.isFinite(n) || n < 1) throw new WasteError('E_ARG', `${what} ${quoted(text)} must be at least one byte`);
  return Math.floor(n);
}

/** 1.23 GiB, 456 MiB … */
export function formatSize(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(Math.abs(v) < 10 ? 2 : 1)} ${units[i]}`;
}
