import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Arena } from '../memory/arena.js';
import { touchPages } from '../memory/touch.js';
import { table } from './measure.js';

export interface PageBenchResult {
  file: string;
  odirect: boolean;
  bytes: number;
  /** Each case in ns per 4 KiB page. */
  rows: { case: string; nsPerPage: number }[];
}

const PAGE = 4096;
const CHUNK = 4 << 20;

/**
 * What a 4 KiB page of arena memory costs the first time it is used, next to later uses: a fresh
 * page written by the CPU, a fresh page filled by an O_DIRECT read and then read, and the same for
 * a page the CPU has touched before. On bare metal the first use costs a page fault (well under a
 * microsecond); under a VM's shadow paging it can cost several, and a decode that meets many fresh
 * pages (the first tokens after a model opens) pays it once per page.
 */
export async function benchPages(opts: { bytes?: number; log?: (s: string) => void } = {}): Promise<PageBenchResult> {
  const log = opts.log ?? (() => {});
  const bytes = opts.bytes ?? 256 << 20;
  const file = path.join(os.tmpdir(), `waste-bench-pages-${process.pid}.bin`);
  log(`writing ${bytes >> 20} MiB to ${file}…`);
  const fdw = fs.openSync(file, 'w');
  const block = Buffer.alloc(CHUNK, 0x5a);
  for (let o = 0; o < bytes; o += CHUNK) fs.writeSync(fdw, block, 0, CHUNK, o);
  fs.fsyncSync(fdw);
  fs.closeSync(fdw);
  const O_DIRECT = (fs.constants as Record<string, number>).O_DIRECT;
  let fd: number;
  let odirect = false;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | (O_DIRECT ?? 0));
    odirect = O_DIRECT !== undefined;
  } catch {
    fd = fs.openSync(file, 'r');
  }
  const rows: PageBenchResult['rows'] = [];
  const pages = bytes / PAGE;
  const ns = (name: string, fn: () => void) => {
    const t0 = process.hrtime.bigint();
    fn();
    rows.push({ case: name, nsPerPage: Number(process.hrtime.bigint() - t0) / pages });
  };
  let sink = 0;
  const fill = (u8: Uint8Array) => {
    for (let o = 0; o < bytes; o += CHUNK) fs.readSync(fd, u8, o, CHUNK, o);
  };
  const fresh = () => {
    const arena = new Arena(bytes + (1 << 20));
    return arena.u8(arena.alloc(bytes, PAGE), bytes);
  };
  try {
    {
      const u8 = fresh();
      ns('fresh page, first CPU write', () => {
        for (let o = 0; o < bytes; o += PAGE) u8[o] = 1;
      });
      ns('  the same pages, second CPU write', () => {
        for (let o = 0; o < bytes; o += PAGE) u8[o] = 2;
      });
    }
    {
      const u8 = fresh();
      ns('fresh page, read from disk into it', () => fill(u8));
      ns('  then its first CPU access', () => (sink ^= touchPages(u8)));
      ns('  then its second CPU access', () => (sink ^= touchPages(u8)));
      ns('  read from disk into it again', () => fill(u8));
      ns('  then the next CPU access', () => (sink ^= touchPages(u8)));
    }
    {
      const u8 = fresh();
      ns('touched page, first CPU write', () => {
        for (let o = 0; o < bytes; o += PAGE) u8[o] = 1;
      });
      ns('  then read from disk into it', () => fill(u8));
      ns('  then the next CPU access', () => (sink ^= touchPages(u8)));
    }
  } finally {
    fs.closeSync(fd);
    fs.rmSync(file, { force: true });
  }
  if (sink === -1) log(''); // keeps the touches observable
  return { file, odirect, bytes, rows };
}

export function renderPageBench(r: PageBenchResult): string {
  return (
    `first use of a 4 KiB page of arena memory, ${r.bytes >> 20} MiB, reads ${r.odirect ? 'with O_DIRECT' : 'buffered (no O_DIRECT)'}\n` +
    table(
      r.rows.map((x) => [x.case, x.nsPerPage.toFixed(0)]),
      ['case', 'ns/page'],
    )
  );
}
