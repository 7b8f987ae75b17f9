import * as fs from 'node:fs';
import { f16 } from '../util/f16.js';
import { WasteError, fromSystemError } from '../util/errors.js';
import { openRegular } from '../util/read.js';
import { type FileChecksum, fdChecksum } from './checksums.js';
import { Fmt } from './format.js';
import type { TrunkEntry } from './manifest.js';
import { rowsCols, storedSizes } from './tensor.js';

export const TRUNK = 'trunk.bin';
const MAX_READ = 1 << 30; // one read stays below Node's 2 GiB limit

/**
 * Check every index entry against the real size of trunk.bin (offsets, lengths, declared bytes)
 * and against every other: no two byte ranges, payload or scales, may share a byte.
 */
export function validateTrunkIndex(entries: TrunkEntry[], fileSize: number): void {
  const ranges: { start: number; end: number; what: string }[] = [];
  for (const t of entries) {
    const { rows, cols } = rowsCols(t.shape);
    const { payload, scaleBytes } = storedSizes(t.fmt, rows, cols, t.group);
    const where = `manifest.json: trunk tensor ${t.name}`;
    if (t.off + payload > fileSize)
      throw new WasteError('E_FORMAT', `${where} needs bytes ${t.off}..${t.off + payload} but ${TRUNK} has ${fileSize}`);
    if (scaleBytes && t.scaleOff + scaleBytes > fileSize)
      throw new WasteError(
        'E_FORMAT',
        `${where} needs scales at ${t.scaleOff}..${t.scaleOff + scaleBytes} but ${TRUNK} has ${fileSize}`,
      );
    if (t.bytes !== undefined && t.bytes !== payload + scaleBytes)
      throw new WasteError('E_FORMAT', `${where} declares ${t.bytes} bytes but its shape and format need ${payload + scaleBytes}`);
    ranges.push({ start: t.off, end: t.off + payload, what: t.name });
    if (scaleBytes) ranges.push({ start: t.scaleOff, end: t.scaleOff + scaleBytes, what: `the scales of ${t.name}` });
  }
  // sorted by start, if any two ranges share a byte then two neighbours do
  ranges.sort((a, b) => a.start - b.start || a.end - b.end);
  for (let i = 1; i < ranges.length; i++) {
    const [a, b] = [ranges[i - 1], ranges[i]];
    if (b.start < a.end)
      throw new WasteError('E_FORMAT', `manifest.json: trunk tensors overlap in ${TRUNK}: ${a.what} (bytes ${a.start}..${a.end}) and ${b.what} (bytes ${b.start}..${b.end})`);
  }
}

/** trunk.bin, open for the life of the model: resident tensors are read from it once (into
 * arenas), and the embedding table stays in it and is read one row per token. */
export class TrunkFile {
  readonly path: string;
  readonly size: number;
  private fd: number;
  private rowBuf: Buffer = Buffer.alloc(0);

  constructor(path: string) {
    this.path = path;
    ({ fd: this.fd, size: this.size } = openRegular(path));
  }

  close(): void {
    if (this.fd >= 0) fs.closeSync(this.fd);
    this.fd = -1;
  }

  /** SHA-256 and length of the whole file, read through once (`--verify` at open). */
  checksum(): FileChecksum {
    return fdChecksum(this.fd, this.path);
  }

  /** Read exactly `n` bytes at `pos` into `dst` (any length; chunked below Node's per-read cap). */
  readInto(dst: Uint8Array, pos: number, what: string): void {
    let done = 0;
    while (done < dst.length) {
      const n = Math.min(MAX_READ, dst.length - done);
      let got: number;
      try {
        got = fs.readSync(this.fd, dst, done, n, pos + done);
      } catch (e) {
        throw fromSystemError(this.path, e);
      }
      if (got <= 0) throw new WasteError('E_IO', `${this.path}: short read of ${what} at byte ${pos + done}`);
      done += got;
    }
  }

  /** One row of an on-disk tensor (the embedding table), dequantized into `dst`. */
  readRow(e: TrunkEntry, row: number, dst: Float32Array): void {
    const { cols } = rowsCols(e.shape);
    const s = storedSizes(e.fmt, 1, cols, e.group);
    const need = s.payload + s.scaleBytes;
    if (this.rowBuf.length < need) this.rowBuf = Buffer.alloc(need);
    const payload = this.rowBuf.subarray(0, s.payload);
    this.readInto(payload, e.off + row * s.rowBytes, `row ${row} of ${e.name}`);
    const dv = new DataView(this.rowBuf.buffer, this.rowBuf.byteOffset, need);
    if (e.fmt === Fmt.F32) for (let i = 0; i < cols; i++) dst[i] = dv.getFloat32(4 * i, true);
    else if (e.fmt === Fmt.F16) for (let i = 0; i < cols; i++) dst[i] = f16(dv.getUint16(2 * i, true));
    else this.dequantRow(e, row, s, payload, dv, dst);
    for (let i = 0; i < cols; i++)
      if (!Number.isFinite(dst[i])) throw new WasteError('E_FORMAT', `${TRUNK}: row ${row} of ${e.name} holds a non-finite value`);
  }

  private dequantRow(e: TrunkEntry, row: number, s: ReturnType<typeof storedSizes>, payload: Uint8Array, dv: DataView, dst: Float32Array): void {
    const cols = dst.length;
    const need = s.payload + s.scaleBytes;
    const scales = this.rowBuf.subarray(s.payload, need);
    this.readInto(scales, e.scaleOff + row * s.scaleBytes, `row ${row} scales of ${e.name}`);
    for (let g = 0; g < s.groups; g++) {
      const sc = f16(dv.getUint16(s.payload + 2 * g, true));
      const end = Math.min(cols, (g + 1) * e.group);
      for (let i = g * e.group; i < end; i++) {
        let q: number;
        if (e.fmt === Fmt.Q8G) q = (payload[i] << 24) >> 24;
        else q = ((i & 1 ? payload[i >> 1] >> 4 : payload[i >> 1]) & 15) - 8;
        dst[i] = q * sc;
      }
    }
  }
}
