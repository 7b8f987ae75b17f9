import * as fs from 'node:fs';
import { crc32 } from '../util/crc32.js';
import { WasteError, fromSystemError, unsupported } from '../util/errors.js';
import { openRegular } from '../util/read.js';
import { ALIGN, type ExpertQuant, EXPERT_HEADER_BYTES, Fmt, MAGIC_EXPERT, type RecordLayout, fmtName } from './format.js';
import type { BankEntry } from './manifest.js';

/**
 * One MoE layer's expert bank, `experts-L{n}.bin`: a flat array of equal-size, 4 KiB-aligned
 * records sorted by expert id, so one read at `expert × stride` fetches a whole expert.
 */
export class ExpertBank {
  readonly layer: number;
  readonly path: string;
  readonly file: string;
  readonly experts: number;
  /** Bytes per record on disk (a multiple of 4 KiB). */
  readonly stride: number;
  readonly codebookBase: number;
  readonly layout: RecordLayout;
  readonly quant: ExpertQuant;
  private fd = -1;

  constructor(dir: string, entry: BankEntry, layout: RecordLayout, quant: ExpertQuant) {
    this.layer = entry.layer;
    this.file = entry.file;
    this.path = `${dir}/${entry.file}`;
    this.experts = entry.experts;
    this.codebookBase = entry.codebookBase;
    this.layout = layout;
    this.quant = quant;
    const where = `manifest.json: layers.${entry.layer}`;
    if (entry.bytes % entry.experts !== 0)
      throw new WasteError('E_FORMAT', `${where}.bytes (${entry.bytes}) is not a whole number of ${entry.experts} records`);
    this.stride = entry.bytes / entry.experts;
    if (this.stride % ALIGN !== 0)
      throw new WasteError('E_FORMAT', `${where}: records of ${this.stride} bytes are not 4 KiB-aligned`);
    if (this.stride < layout.recordBytes)
      throw new WasteError(
        'E_FORMAT',
        `${where}: records of ${this.stride} bytes are too small for the expert shapes, which need ${layout.recordBytes}`,
      );
    const { fd, size } = openRegular(this.path);
    this.fd = fd;
    if (size !== entry.bytes) {
      this.close();
      throw new WasteError(
        'E_FORMAT',
        `${entry.file}: ${size} bytes, but the manifest says ${entry.bytes} (${entry.experts} records of ${this.stride}); the bank is ${size < entry.bytes ? 'truncated' : 'longer than described'}`,
      );
    }
  }

  close(): void {
    if (this.fd >= 0) fs.closeSync(this.fd);
    this.fd = -1;
  }

  /** Read expert `e`'s record into `dst` (length ≥ stride) and check it; returns the record view. */
  read(expert: number, dst: Uint8Array, verifyCrc: boolean): Uint8Array {
    if (!(expert >= 0 && expert < this.experts))
      throw new WasteError('E_ARG', `layer ${this.layer} has no expert ${expert}`);
    const rec = dst.subarray(0, this.stride);
    let done = 0;
    try {
      while (done < this.stride) {
        const got = fs.readSync(this.fd, rec, done, this.stride - done, expert * this.stride + done);
        if (got <= 0) break;
        done += got;
      }
    } catch (e) {
      throw fromSystemError(this.path, e);
    }
    if (done !== this.stride) throw this.fault(expert, `short read (${done} of ${this.stride} bytes)`);
    this.check(expert, rec, verifyCrc);
    return rec;
  }

  fault(expert: number, what: string): WasteError {
    return new WasteError('E_IO', `${this.file}: layer ${this.layer} expert ${expert}: ${what}`);
  }

  /**
   * The header is derived from the manifest and compared, never believed: an offset from a damaged
   * header must not reach the arithmetic. The payload checksum is optional (a pass over the record).
   */
  check(expert: number, rec: Uint8Array, verifyCrc: boolean): void {
    const dv = new DataView(rec.buffer, rec.byteOffset, rec.length);
    const L = this.layout;
    const magic = dv.getUint32(0, true);
    if (magic !== MAGIC_EXPERT) throw this.fault(expert, 'record header has a bad magic number');
    const layer = dv.getUint16(4, true);
    const id = dv.getUint16(6, true);
    if (layer !== (this.layer & 0xffff) || id !== (expert & 0xffff))
      throw this.fault(expert, `record header names layer ${layer} expert ${id}`);
    // The C converter writes VQ3R in the fmt byte whatever the stage count; the geometry comes
    // from the manifest, so any byte-indexed VQ format byte is accepted for byte indices.
    const fmt = dv.getUint8(8);
    if (fmt !== Fmt.VQ3R && fmt !== Fmt.VQ2R)
      throw this.fault(expert, `record format is ${fmtName(fmt)}, the manifest says ${this.quant.name}`);
    const flags = dv.getUint8(9);
    if (flags & 1) throw unsupported(`${this.file}: layer ${this.layer} expert ${expert} stores bf16 row scales`);
    const cb = dv.getUint16(10, true);
    if (cb !== this.codebookBase)
      throw this.fault(expert, `record names codebook ${cb}, the manifest says layer ${this.layer} uses ${this.codebookBase}`);
    if (dv.getUint16(12, true) !== 0) throw this.fault(expert, 'record names a low-rank block, which format v0 does not have');
    const blocks = dv.getUint32(16, true);
    if (blocks * ALIGN !== this.stride)
      throw this.fault(expert, `record says it is ${blocks} blocks of 4 KiB; the bank's records are ${this.stride / ALIGN}`);
    const offs = [dv.getUint32(20, true), dv.getUint32(24, true), dv.getUint32(28, true), dv.getUint32(32, true)];
    const wantOffs = [L.gateOff, L.upOff, L.downOff, L.scaleOff];
    const names = ['gate', 'up', 'down', 'scales'];
    for (let i = 0; i < 4; i++)
      if (offs[i] !== wantOffs[i])
        throw this.fault(expert, `record puts ${names[i]} at byte ${offs[i]}; the expert shapes put it at ${wantOffs[i]}`);
    if (verifyCrc) {
      const stored = dv.getUint32(36, true);
      const actual = crc32(rec.subarray(EXPERT_HEADER_BYTES, L.payloadEnd));
      if (stored !== actual) throw this.fault(expert, 'checksum mismatch (the record is damaged)');
    }
    // Cheap next to the arithmetic, and what keeps a damaged record from answering silently
    // wrong without --verify: a non-finite row scale, or an index past a short codebook.
    for (let o = L.scaleOff; o < L.payloadEnd; o += 2)
      if ((dv.getUint16(o, true) & 0x7c00) === 0x7c00)
        throw this.fault(expert, `row scale ${(o - L.scaleOff) / 2} is not a finite number`);
    if (this.quant.entries < 256) {
      const limit = this.quant.entries;
      for (let i = L.gateOff; i < L.scaleOff; i++)
        if (rec[i] >= limit) throw this.fault(expert, `index ${rec[i]} at byte ${i} is past the ${limit}-entry codebook`);
    }
  }
}
