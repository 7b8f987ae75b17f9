import * as fs from 'node:fs';
import { Arena, MAX_ARENA_BYTES, alignUp } from '../memory/arena.js';
import { f16 } from '../util/f16.js';
import { WasteError, fromSystemError, unsupported } from '../util/errors.js';
import { Fmt } from './format.js';
import type { TrunkEntry } from './manifest.js';
import { type Tensor, makeViews, rowsCols, storedSizes } from './tensor.js';

export const TRUNK = 'trunk.bin';
const MAX_READ = 1 << 30; // one read stays below Node's 2 GiB limit

/** Check every index entry against the real size of trunk.bin: offsets, lengths, declared bytes. */
export function validateTrunkIndex(entries: TrunkEntry[], fileSize: number): void {
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
  }
}

/** trunk.bin, open for the life of the model: resident tensors are loaded from it once, and the
 * embedding table stays in it and is read one row per token. */
export class TrunkFile {
  readonly path: string;
  readonly size: number;
  private fd: number;
  private rowBuf: Buffer = Buffer.alloc(0);

  constructor(path: string) {
    this.path = path;
    try {
      this.fd = fs.openSync(path, 'r');
      this.size = fs.fstatSync(this.fd).size;
    } catch (e) {
      throw fromSystemError(path, e);
    }
  }

  close(): void {
    if (this.fd >= 0) fs.closeSync(this.fd);
    this.fd = -1;
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

  /**
   * Load tensors into arenas, each layer's tensors together (a kernel call touches one arena).
   * Arenas are sized to exactly what they hold, so resident data beyond 4 GiB spreads over several.
   */
  load(entries: TrunkEntry[]): Map<string, Tensor> {
    const groups = new Map<string, TrunkEntry[]>();
    for (const e of entries) {
      const m = /(?:^|\.)layers\.(\d+)\./.exec(e.name);
      const key = m ? `layer ${m[1]}` : 'global';
      let g = groups.get(key);
      if (!g) groups.set(key, (g = []));
      g.push(e);
    }
    const footprint = (e: TrunkEntry): number => {
      const { rows, cols } = rowsCols(e.shape);
      const s = storedSizes(e.fmt, rows, cols, e.group);
      return alignUp(s.payload, 64) + alignUp(s.scaleBytes, 64);
    };
    // Plan: fill an arena group by group; a group too big for one arena is split by tensor.
    const plans: TrunkEntry[][] = [];
    let cur: TrunkEntry[] = [];
    let curBytes = 0;
    const push = (list: TrunkEntry[], bytes: number): void => {
      if (curBytes + bytes > MAX_ARENA_BYTES && cur.length) {
        plans.push(cur);
        cur = [];
        curBytes = 0;
      }
      cur.push(...list);
      curBytes += bytes;
    };
    for (const list of groups.values()) {
      const bytes = list.reduce((s, e) => s + footprint(e), 0);
      if (bytes <= MAX_ARENA_BYTES) push(list, bytes);
      else
        for (const e of list) {
          const b = footprint(e);
          if (b > MAX_ARENA_BYTES) throw unsupported(`trunk tensor ${e.name} is ${b} bytes; one tensor must fit in 4 GiB`);
          push([e], b);
        }
    }
    if (cur.length) plans.push(cur);

    const out = new Map<string, Tensor>();
    for (const plan of plans) {
      const arena = new Arena(Math.max(64, plan.reduce((s, e) => s + footprint(e), 0)));
      for (const e of plan) {
        const { rows, cols } = rowsCols(e.shape);
        const s = storedSizes(e.fmt, rows, cols, e.group);
        const off = arena.alloc(s.payload, 64);
        const scaleOff = s.scaleBytes ? arena.alloc(s.scaleBytes, 64) : -1;
        this.readInto(arena.u8(off, s.payload), e.off, e.name);
        if (s.scaleBytes) this.readInto(arena.u8(scaleOff, s.scaleBytes), e.scaleOff, `${e.name} scales`);
        const t: Tensor = {
          name: e.name,
          fmt: e.fmt,
          shape: e.shape,
          rows,
          cols,
          group: e.group,
          groups: s.groups,
          rowBytes: s.rowBytes,
          arena,
          off,
          scaleOff,
        };
        makeViews(t);
        checkFinite(t);
        out.set(e.name, t);
      }
    }
    return out;
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

/** A NaN or infinity in a weight would only show up as a silently wrong answer; refuse it at load. */
function checkFinite(t: Tensor): void {
  const bad = (what: string, i: number) =>
    new WasteError('E_FORMAT', `${TRUNK}: tensor ${t.name} holds a non-finite ${what} at index ${i}`);
  if (t.f32) {
    for (let i = 0; i < t.f32.length; i++) if (!Number.isFinite(t.f32[i])) throw bad('value', i);
  } else {
    const h = t.f16 ?? t.scales!;
    for (let i = 0; i < h.length; i++) if ((h[i] & 0x7c00) === 0x7c00) throw bad(t.f16 ? 'value' : 'group scale', i);
  }
}
