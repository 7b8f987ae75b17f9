import * as fs from 'node:fs';
import * as path from 'node:path';
import { crc32 } from '../util/crc32.js';
import { fromSystemError } from '../util/errors.js';
import { writeFileAtomic } from '../util/write-atomic.js';
import {
  ALIGN,
  CODEBOOK_HEADER_BYTES,
  EXPERT_HEADER_BYTES,
  type ExpertQuant,
  Fmt,
  MAGIC_CODEBOOK,
  MAGIC_EXPERT,
  type RecordLayout,
  indexOffset,
  recordFmt,
} from './format.js';
import { CHECKSUMS_KEY, type FileChecksum, MANIFEST_DIGEST_KEY, fileChecksum, manifestDigest } from './checksums.js';
import { storedSizes } from './tensor.js';

/**
 * Writers for format v0, shared by `waste synth` and the converter. They produce exactly what the
 * reader checks: trunk tensors back to back with their scales, WCBK codebooks, and 4 KiB-aligned
 * WEXP records with blocked indices and a zlib CRC32 over the payload.
 */

export interface TrunkIndexEntry {
  name: string;
  fmt: number;
  off: number;
  shape: number[];
  bytes: number;
  group?: number;
  scale_off?: number;
}

/** A few rows of a tensor as stored: their payload, and their group scales for Q8G/Q4G. */
export interface RowChunk {
  payload: Uint8Array;
  scales?: Uint16Array;
}

/** Appends tensors to trunk.bin as they are produced, so a large trunk never sits in memory. */
export class TrunkWriter {
  readonly index: TrunkIndexEntry[] = [];
  private fd: number;
  private pos = 0;

  constructor(readonly file: string) {
    try {
      this.fd = fs.openSync(file, 'w');
    } catch (e) {
      throw fromSystemError(file, e);
    }
  }

  private write(bytes: Uint8Array): void {
    let done = 0;
    try {
      while (done < bytes.length) done += fs.writeSync(this.fd, bytes, done, bytes.length - done, this.pos + done);
    } catch (e) {
      // a full disk, named (the converter turns it into what the job still needs)
      throw fromSystemError(this.file, e);
    }
    this.pos += bytes.length;
  }

  /**
   * Write a tensor already in its stored form: `payload` (F32/F16 values, or Q8G/Q4G rows) and,
   * for Q8G/Q4G, `scales` (f16 bits, [rows][groups]).
   */
  add(name: string, fmt: number, shape: number[], payload: Uint8Array, scales?: Uint16Array, group = 128): void {
    this.addRows(name, fmt, shape, [{ payload, scales }], group);
  }

  /**
   * Write a tensor produced a few rows at a time (a large embedding table is never whole in
   * memory): each chunk's payload is written as it comes, the scales follow the last one.
   */
  addRows(name: string, fmt: number, shape: number[], chunks: Iterable<RowChunk>, group = 128): void {
    const t = this.tensor(name, fmt, shape, group);
    for (const c of chunks) t.add(c);
    t.end();
  }

  /** addRows for chunks made a few at a time between turns of the event loop (a long conversion). */
  async addRowsAsync(name: string, fmt: number, shape: number[], chunks: AsyncIterable<RowChunk>, group = 128): Promise<void> {
    const t = this.tensor(name, fmt, shape, group);
    for await (const c of chunks) t.add(c);
    t.end();
  }

  private tensor(name: string, fmt: number, shape: number[], group: number): { add: (c: RowChunk) => void; end: () => void } {
    const cols = shape.length ? shape[shape.length - 1] : 1;
    const rows = cols ? shape.reduce((a, b) => a * b, 1) / cols : 0;
    const s = storedSizes(fmt, rows, cols, group);
    const off = this.pos;
    const scales: Uint16Array[] = [];
    const add = (c: RowChunk) => {
      this.write(c.payload);
      if (c.scales) scales.push(c.scales);
    };
    return { add, end: () => this.indexTensor(name, fmt, shape, group, off, s, scales) };
  }

  /** The tensor's scales after its payload, and its index entry, once its last chunk is written. */
  private indexTensor(name: string, fmt: number, shape: number[], group: number, off: number, s: { payload: number; scaleBytes: number }, scales: Uint16Array[]): void {
    const scaleBytes = scales.reduce((a, c) => a + c.byteLength, 0);
    if (this.pos - off !== s.payload || scaleBytes !== s.scaleBytes)
      throw new Error(`TrunkWriter: ${name}'s payload or scales do not match its shape [${shape}]`);
    const entry: TrunkIndexEntry = { name, fmt, off, shape, bytes: s.payload + s.scaleBytes };
    if (fmt === Fmt.Q8G || fmt === Fmt.Q4G) {
      entry.group = group;
      entry.scale_off = this.pos;
      for (const sc of scales) this.write(new Uint8Array(sc.buffer, sc.byteOffset, sc.byteLength));
    }
    this.index.push(entry);
  }

  /** Index a tensor and leave its bytes a hole in the file (a sparse container: sizes without data). */
  reserve(name: string, fmt: number, shape: number[], group = 128): void {
    const cols = shape.length ? shape[shape.length - 1] : 1;
    const rows = cols ? shape.reduce((a, b) => a * b, 1) / cols : 0;
    const s = storedSizes(fmt, rows, cols, group);
    const entry: TrunkIndexEntry = { name, fmt, off: this.pos, shape, bytes: s.payload + s.scaleBytes };
    this.pos += s.payload;
    if (fmt === Fmt.Q8G || fmt === Fmt.Q4G) {
      entry.group = group;
      entry.scale_off = this.pos;
      this.pos += s.scaleBytes;
    }
    this.index.push(entry);
  }

  close(): void {
    // a reserved tail is a hole the file must still reach
    if (fs.fstatSync(this.fd).size < this.pos) fs.ftruncateSync(this.fd, this.pos);
    fs.fsyncSync(this.fd);
    fs.closeSync(this.fd);
  }

  /** Close without syncing, after a failure (the caller discards the file). */
  abandon(): void {
    try {
      fs.closeSync(this.fd);
    } catch {
      /* already closed */
    }
  }
}

/** WCBK records numbered from `firstId`: `books` is [count][entries][vecDim] of f16 bits. */
export function encodeCodebooks(books: Uint16Array, count: number, q: ExpertQuant, firstId = 0): Uint8Array {
  const per = q.entries * q.vecDim;
  const rec = CODEBOOK_HEADER_BYTES + per * 2;
  const out = new Uint8Array(count * rec);
  const dv = new DataView(out.buffer);
  for (let b = 0; b < count; b++) {
    const base = b * rec;
    dv.setUint32(base, MAGIC_CODEBOOK, true);
    dv.setUint16(base + 4, (firstId + b) & 0xffff, true);
    dv.setUint8(base + 6, Fmt.VQ3R); // written as VQ3R whatever the expert format, as the C converter does
    dv.setUint8(base + 7, q.vecDim);
    dv.setUint32(base + 8, q.entries, true);
    for (let i = 0; i < per; i++) dv.setUint16(base + CODEBOOK_HEADER_BYTES + 2 * i, books[b * per + i], true);
  }
  return out;
}

/**
 * One expert record. `indices[m]` holds matrix m's codes row-major as [row][vector][stage];
 * `scales[m]` its f16 row scales. The result is `layout.recordBytes` long.
 */
export function encodeExpertRecord(
  layer: number,
  expert: number,
  codebookBase: number,
  layout: RecordLayout,
  q: ExpertQuant,
  indices: [Uint8Array, Uint8Array, Uint8Array],
  scales: [Uint16Array, Uint16Array, Uint16Array],
  out: Uint8Array = new Uint8Array(layout.recordBytes),
): Uint8Array {
  out.fill(0, 0, layout.recordBytes);
  const offs = [layout.gateOff, layout.upOff, layout.downOff];
  for (let m = 0; m < 3; m++) {
    const { rows, cols } = layout.shapes[m];
    const vectors = cols / q.vecDim;
    const src = indices[m];
    for (let r = 0; r < rows; r++)
      for (let v = 0; v < vectors; v++) {
        const d = offs[m] + indexOffset(r, v, vectors, q);
        const s0 = (r * vectors + v) * q.stages;
        for (let s = 0; s < q.stages; s++) out[d + s] = src[s0 + s];
      }
  }
  const dv = new DataView(out.buffer, out.byteOffset, layout.recordBytes);
  let so = layout.scaleOff;
  for (let m = 0; m < 3; m++) for (let r = 0; r < layout.shapes[m].rows; r++, so += 2) dv.setUint16(so, scales[m][r], true);
  dv.setUint32(0, MAGIC_EXPERT, true);
  dv.setUint16(4, layer, true);
  dv.setUint16(6, expert, true);
  dv.setUint8(8, recordFmt(q));
  dv.setUint8(9, 0);
  dv.setUint16(10, codebookBase, true);
  dv.setUint16(12, 0, true);
  dv.setUint16(14, 0, true);
  dv.setUint32(16, layout.recordBytes / ALIGN, true);
  dv.setUint32(20, layout.gateOff, true);
  dv.setUint32(24, layout.upOff, true);
  dv.setUint32(28, layout.downOff, true);
  dv.setUint32(32, layout.scaleOff, true);
  dv.setUint32(36, crc32(out.subarray(EXPERT_HEADER_BYTES, layout.payloadEnd)), true);
  return out.subarray(0, layout.recordBytes);
}

/**
 * Write manifest.json, the commit record: last, atomically, with the `checksums` of `checksummed`
 * (files of `dir` already complete, read back through once) and, after them, its own
 * `manifest_sha256`.
 */
export function writeManifest(dir: string, manifest: Record<string, unknown>, checksummed: string[]): void {
  const sums: Record<string, FileChecksum> = {};
  for (const f of checksummed) sums[f] = fileChecksum(path.join(dir, f));
  const doc = { ...manifest, [CHECKSUMS_KEY]: sums };
  writeFileAtomic(path.join(dir, 'manifest.json'), JSON.stringify({ ...doc, [MANIFEST_DIGEST_KEY]: manifestDigest(doc) }, null, 1) + '\n');
}
