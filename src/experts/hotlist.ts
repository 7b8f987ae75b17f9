import * as fs from 'node:fs';
import * as path from 'node:path';
import { processAlive } from '../util/process-alive.js';
import { readBytes } from '../util/read.js';

/**
 * The learned hotlist, `usage.waste`, in the C engine's format: a 16-byte header {u32 'WUSG',
 * u32 version 1, u64 clock} then 16-byte entries {u16 layer, u16 expert, u32 hits, u32 last use,
 * u32 0}, at most one per expert.
 */
export interface HotEntry {
  layer: number;
  expert: number;
  hits: number;
  last: number;
}

const MAGIC = 0x47535557; // 'WUSG'

/**
 * A hotlist's entries (untrusted: an entry naming no expert of `banks` is skipped, a repeated one
 * kept once, a file that is not a hotlist gives none), most hits first.
 */
export function readHotlist(file: string, experts: (layer: number) => number | undefined, totalExperts: number): HotEntry[] {
  let buf: Buffer;
  try {
    // a hotlist names each expert at most once
    buf = readBytes(file, 16 + 16 * totalExperts);
  } catch {
    return [];
  }
  if (buf.length < 16 || buf.readUInt32LE(0) !== MAGIC || buf.readUInt32LE(4) !== 1 || (buf.length - 16) % 16 !== 0) return [];
  const seen = new Set<number>();
  const out: HotEntry[] = [];
  for (let o = 16; o < buf.length; o += 16) {
    const layer = buf.readUInt16LE(o);
    const expert = buf.readUInt16LE(o + 2);
    const n = experts(layer);
    const k = layer * 65536 + expert;
    if (n === undefined || expert >= n || seen.has(k)) continue;
    seen.add(k);
    out.push({ layer, expert, hits: buf.readUInt32LE(o + 4), last: buf.readUInt32LE(o + 8) });
  }
  return out.sort((a, b) => b.hits - a.hits || a.layer - b.layer || a.expert - b.expert);
}

/**
 * What a run learned, merged with what earlier runs did: the experts held now with their counts
 * (a record warmed from the file carries its count on, so it is not added again), then those the
 * file named that are no longer held, at half their count — so an expert that stops being used
 * fades out over a few runs instead of being forgotten by one short run.
 */
export function mergeHotlist(held: readonly HotEntry[], previous: readonly HotEntry[]): HotEntry[] {
  const out = new Map<number, HotEntry>();
  for (const e of held) out.set(e.layer * 65536 + e.expert, e);
  for (const e of previous) {
    const k = e.layer * 65536 + e.expert;
    const hits = Math.floor(e.hits / 2);
    if (!out.has(k) && hits > 0) out.set(k, { ...e, hits, last: 0 });
  }
  return [...out.values()].sort((a, b) => b.hits - a.hits || a.layer - b.layer || a.expert - b.expert);
}

/**
 * Write a hotlist so that a reader sees the old file or the new one, never a part: into a file
 * of its own next to it, flushed to disk, then renamed over it. A failure leaves the old file as it
 * was (and no temporary behind), and is thrown.
 */
export function writeHotlist(file: string, clock: number, entries: readonly HotEntry[]): void {
  const buf = Buffer.alloc(16 + 16 * entries.length);
  buf.writeUInt32LE(MAGIC, 0);
  buf.writeUInt32LE(1, 4);
  buf.writeBigUInt64LE(BigInt(Math.max(0, Math.floor(clock))), 8);
  entries.forEach((e, i) => {
    const o = 16 + 16 * i;
    buf.writeUInt16LE(e.layer, o);
    buf.writeUInt16LE(e.expert, o + 2);
    buf.writeUInt32LE(Math.min(0xffffffff, e.hits), o + 4);
    buf.writeUInt32LE(Math.min(0xffffffff, e.last), o + 8);
    buf.writeUInt32LE(0, o + 12);
  });
  const tmp = `${file}.tmp-${process.pid}`;
  removeStaleTemporaries(file);
  let fd: number | undefined;
  try {
    fd = fs.openSync(tmp, 'w', 0o644);
    fs.writeSync(fd, buf);
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fd = undefined;
    fs.renameSync(tmp, file);
  } catch (e) {
    if (fd !== undefined) fs.closeSync(fd);
    try {
      fs.unlinkSync(tmp);
    } catch {
      /* never created */
    }
    throw e;
  }
}

/**
 * The temporaries a writer killed mid-save left beside `file` (`FILE.tmp-PID` of a process that is
 * gone): saves while a process runs make a kill during one likelier, and nothing else removes them.
 */
function removeStaleTemporaries(file: string): void {
  const dir = path.dirname(file);
  const prefix = `${path.basename(file)}.tmp-`;
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number(name.slice(prefix.length));
    if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid || processAlive(pid)) continue;
    try {
      fs.unlinkSync(path.join(dir, name));
    } catch {
      /* gone already, or not ours to remove */
    }
  }
}
