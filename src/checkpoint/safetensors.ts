import * as fs from 'node:fs';
import * as path from 'node:path';
import { f16 } from '../util/f16.js';
import { WasteError, fromSystemError, unsupported } from '../util/errors.js';
import { isObject } from '../util/fields.js';
import { checkModelLinks } from '../util/model-dir.js';
import { openRegular, readJson } from '../util/read.js';

/**
 * HuggingFace safetensors, single file or sharded with `model.safetensors.index.json`. Everything in
 * them is untrusted: the header's size, its JSON, each tensor's dtype, shape and offsets are checked
 * against the file before a byte of data is read, and tensors are read one at a time (or a range of
 * rows at a time), never a whole shard.
 */
export type Dtype = 'BF16' | 'F16' | 'F32' | 'U8' | 'F8_E4M3' | 'I32';
const DTYPE_BYTES: Record<Dtype, number> = { BF16: 2, F16: 2, F32: 4, U8: 1, F8_E4M3: 1, I32: 4 };
const MAX_HEADER = 256 << 20;

export interface TensorInfo {
  name: string;
  dtype: Dtype;
  shape: number[];
  /** Shard file (path) holding it. */
  file: string;
  /** Absolute byte offset of the data in the file. */
  offset: number;
  bytes: number;
}

interface Shard {
  file: string;
  fd: number;
  size: number;
  tensors: Map<string, TensorInfo>;
}

export class SafetensorsSet {
  private readonly shards = new Map<string, Shard>();
  private readonly index = new Map<string, TensorInfo>();
  private buf = Buffer.alloc(0);

  /** The tensors of every `*.safetensors` named by the directory's index, or its single `model.safetensors`. */
  static open(dir: string): SafetensorsSet {
    checkModelLinks(dir);
    const set = new SafetensorsSet();
    try {
      const indexFile = path.join(dir, 'model.safetensors.index.json');
      if (fs.existsSync(indexFile)) {
        const doc = readJson(indexFile);
        const map = isObject(doc) ? doc.weight_map : undefined;
        if (!isObject(map)) throw new WasteError('E_FORMAT', `${indexFile}: weight_map is missing or not an object`);
        const byFile = new Map<string, string[]>();
        for (const [name, file] of Object.entries(map)) {
          if (typeof file !== 'string' || !/^[A-Za-z0-9._-]+$/.test(file) || file === '.' || file === '..')
            throw new WasteError('E_FORMAT', `${indexFile}: weight_map.${name} must name a file in the checkpoint directory`);
          let list = byFile.get(file);
          if (!list) byFile.set(file, (list = []));
          list.push(name);
        }
        for (const [file, names] of byFile) {
          const shard = set.openShard(path.join(dir, file));
          for (const name of names) {
            const t = shard.tensors.get(name);
            if (!t) throw new WasteError('E_FORMAT', `${indexFile}: ${name} is mapped to ${file}, which does not contain it`);
            set.index.set(name, t);
          }
        }
      } else {
        const single = path.join(dir, 'model.safetensors');
        if (!fs.existsSync(single))
          throw new WasteError('E_IO', `${dir}: no model.safetensors and no model.safetensors.index.json; is this a HuggingFace checkpoint?`);
        const shard = set.openShard(single);
        for (const t of shard.tensors.values()) set.index.set(t.name, t);
      }
    } catch (e) {
      set.close();
      throw e;
    }
    return set;
  }

  /**
   * A set whose shards are not all on disk yet: their headers (the first 8 + n bytes of each, read
   * ahead, e.g. over HTTP) give every tensor's place, and each shard is opened only when one of its
   * tensors is read. `weightMap` is the index's (null for a single `model.safetensors`).
   */
  static fromHeaders(dir: string, weightMap: Record<string, string> | null, headers: Map<string, { size: number; head: Uint8Array }>): SafetensorsSet {
    const set = new SafetensorsSet();
    for (const [file, h] of headers) {
      const shard: Shard = { file: path.join(dir, file), fd: -1, size: h.size, tensors: parseHeader(path.join(dir, file), h.head, h.size) };
      set.shards.set(shard.file, shard);
    }
    if (weightMap) {
      for (const [name, file] of Object.entries(weightMap)) {
        const t = set.shards.get(path.join(dir, file))?.tensors.get(name);
        if (!t) throw new WasteError('E_FORMAT', `model.safetensors.index.json: ${name} is mapped to ${file}, which does not contain it`);
        set.index.set(name, t);
      }
    } else for (const s of set.shards.values()) for (const t of s.tensors.values()) set.index.set(t.name, t);
    return set;
  }

  private openShard(file: string): Shard {
    // a FIFO or a device in a shard's place is refused, not waited on or read without end
    const { fd, size } = openRegular(file);
    const shard: Shard = { file, fd, size, tensors: new Map() };
    this.shards.set(file, shard);
    if (size < 8) throw new WasteError('E_FORMAT', `${path.basename(file)}: ${size} bytes is too short for a safetensors file`);
    const head = Buffer.alloc(8);
    fs.readSync(fd, head, 0, 8, 0);
    const n = Number(head.readBigUInt64LE(0));
    if (n < 2 || n > MAX_HEADER || 8 + n > size) throw new WasteError('E_FORMAT', `${path.basename(file)}: header length ${n} does not fit the file (${size} bytes)`);
    const all = Buffer.alloc(8 + n);
    head.copy(all);
    if (fs.readSync(fd, all, 8, n, 8) !== n) throw new WasteError('E_FORMAT', `${path.basename(file)}: short read of the header`);
    shard.tensors = parseHeader(file, all, size);
    return shard;
  }

  /** The shard files (paths) and the tensors each holds. */
  files(): Map<string, string[]> {
    const m = new Map<string, string[]>();
    for (const t of this.index.values()) {
      let l = m.get(t.file);
      if (!l) m.set(t.file, (l = []));
      l.push(t.name);
    }
    return m;
  }

  /** Close a shard's file (it may be deleted after); a later read opens it again. */
  release(file: string): void {
    const s = this.shards.get(file);
    if (s && s.fd >= 0) fs.closeSync(s.fd);
    if (s) s.fd = -1;
  }

  /**
   * Read the tensors that `file` (a safetensors file of copies) holds from it from now on instead
   * of from their shard: each must be one the set has, with the same dtype and shape.
   */
  repoint(file: string): void {
    const shard = this.openShard(file);
    for (const t of shard.tensors.values()) {
      const old = this.index.get(t.name);
      if (!old || old.dtype !== t.dtype || old.shape.join() !== t.shape.join()) throw new WasteError('E_FORMAT', `${path.basename(file)}: ${t.name} is not a copy of the checkpoint's`);
      this.index.set(t.name, t);
    }
  }

  close(): void {
    for (const s of this.shards.values()) if (s.fd >= 0) fs.closeSync(s.fd);
    this.shards.clear();
  }

  names(): string[] {
    return [...this.index.keys()];
  }

  has(name: string): boolean {
    return this.index.has(name);
  }

  info(name: string): TensorInfo {
    const t = this.index.get(name);
    if (!t) throw new WasteError('E_FORMAT', `the checkpoint has no tensor ${name}`);
    return t;
  }

  /** Rows [row0, row0 + n) of a tensor viewed as [rows][last dim], as f32, into `out`. */
  readRows(name: string, row0: number, n: number, out: Float32Array): void {
    const t = this.info(name);
    if (t.dtype === 'U8') throw new WasteError('E_FORMAT', `the checkpoint's ${name} is stored as U8 (packed bytes), not as numbers`);
    if (t.dtype === 'F8_E4M3') throw new WasteError('E_FORMAT', `the checkpoint's ${name} is stored as F8_E4M3 without its weight_scale_inv`);
    if (t.dtype === 'I32') throw new WasteError('E_FORMAT', `the checkpoint's ${name} is stored as I32 (packed INT4, or integers), not as numbers`);
    const cols = t.shape.length ? t.shape[t.shape.length - 1] : 1;
    const size = DTYPE_BYTES[t.dtype];
    const bytes = n * cols * size;
    if (out.length < n * cols) throw new Error('readRows: output too small');
    this.readRange(t, row0 * cols * size, bytes);
    const m = n * cols;
    const b = this.buf;
    if (t.dtype === 'F32') out.set(new Float32Array(b.buffer, b.byteOffset, m));
    else {
      const h = new Uint16Array(b.buffer, b.byteOffset, m);
      if (t.dtype === 'F16') for (let i = 0; i < m; i++) out[i] = f16(h[i]);
      else {
        // bf16 is the top half of an f32
        const o = new Uint32Array(out.buffer, out.byteOffset, m);
        for (let i = 0; i < m; i++) o[i] = h[i] << 16;
      }
    }
  }

  /** Rows [row0, row0 + n) of a U8 (packed bytes), F8_E4M3 or I32 (packed INT4) tensor as they are stored, into `out`. */
  readBytes(name: string, row0: number, n: number, out: Uint8Array): void {
    const t = this.info(name);
    if (t.dtype !== 'U8' && t.dtype !== 'F8_E4M3' && t.dtype !== 'I32') throw new WasteError('E_FORMAT', `the checkpoint's ${name} is stored as ${t.dtype}, not as packed bytes (U8)`);
    const row = (t.shape.length ? t.shape[t.shape.length - 1] : 1) * DTYPE_BYTES[t.dtype];
    this.readRange(t, row0 * row, n * row);
    out.set(this.buf.subarray(0, n * row));
  }

  /** Bytes [start, start + out.length) of a tensor as they are stored (any dtype), into `out`. */
  readRaw(name: string, start: number, out: Uint8Array): void {
    this.readRange(this.info(name), start, out.length);
    out.set(this.buf.subarray(0, out.length));
  }

  /** `bytes` bytes of tensor `t` from `start` into the read buffer. */
  private readRange(t: TensorInfo, start: number, bytes: number): void {
    if (start + bytes > t.bytes) throw new WasteError('E_ARG', `${t.name}: bytes ${start}..${start + bytes} are past its end`);
    // unpooled, so its memory starts aligned for the typed views below
    if (this.buf.length < bytes) this.buf = Buffer.allocUnsafeSlow(Math.max(bytes, 1 << 20));
    const shard = this.shards.get(t.file)!;
    if (shard.fd < 0) {
      const { fd, size } = openRegular(shard.file);
      if (size !== shard.size) {
        fs.closeSync(fd);
        throw new WasteError('E_IO', `${path.basename(shard.file)} has ${size} bytes, its header was read from a file of ${shard.size}`);
      }
      shard.fd = fd;
    }
    let done = 0;
    const pos = t.offset + start;
    while (done < bytes) {
      const got = fs.readSync(shard.fd, this.buf, done, Math.min(bytes - done, 1 << 30), pos + done);
      if (got <= 0) throw new WasteError('E_IO', `${path.basename(t.file)}: short read of ${t.name}`);
      done += got;
    }
  }

  /** The whole tensor as f32 (for tensors small enough to hold). */
  readF32(name: string): Float32Array {
    const t = this.info(name);
    const numel = t.shape.reduce((a, d) => a * d, 1);
    const cols = t.shape.length ? t.shape[t.shape.length - 1] : 1;
    const out = new Float32Array(numel);
    const rowsPerRead = Math.max(1, Math.floor((64 << 20) / (cols * 4)));
    const rows = cols ? numel / cols : 0;
    for (let r = 0; r < rows; r += rowsPerRead) {
      const n = Math.min(rowsPerRead, rows - r);
      this.readRows(name, r, n, out.subarray(r * cols, (r + n) * cols));
    }
    return out;
  }
}

/** A shard's tensors from its header bytes (the length and the JSON), checked against the file's size. */
function parseHeader(file: string, all: Uint8Array, size: number): Map<string, TensorInfo> {
  const name = path.basename(file);
  const bad = (what: string) => new WasteError('E_FORMAT', `${name}: ${what}`);
  if (size < 8 || all.length < 8) throw bad(`${size} bytes is too short for a safetensors file`);
  const n = Number(Buffer.from(all.buffer, all.byteOffset, 8).readBigUInt64LE(0));
  if (n < 2 || n > MAX_HEADER || 8 + n > size) throw bad(`header length ${n} does not fit the file (${size} bytes)`);
  if (all.length < 8 + n) throw bad('short read of the header');
  let doc: unknown;
  try {
    doc = JSON.parse(Buffer.from(all.buffer, all.byteOffset + 8, n).toString('utf8'));
  } catch (e) {
    throw bad(`header is not valid JSON (${(e as Error).message})`);
  }
  if (!isObject(doc)) throw bad('header is not a JSON object');
  const tensors = new Map<string, TensorInfo>();
  const dataStart = 8 + n;
  const dataSize = size - dataStart;
  for (const [tname, meta] of Object.entries(doc)) {
    if (tname === '__metadata__') continue;
    if (!isObject(meta)) throw bad(`${tname}: entry is not an object`);
    const dtype = meta.dtype;
    if (typeof dtype !== 'string') throw bad(`${tname}: dtype is missing`);
    if (!(dtype in DTYPE_BYTES)) throw unsupported(`${name}: ${tname} is stored as ${dtype}; the converter reads BF16, F16, F32, U8 (MXFP4's packed values and scales), F8_E4M3 (with 128 × 128 block scales) and I32 (packed INT4)`);
    const shape = meta.shape;
    if (!Array.isArray(shape) || shape.length > 8 || !shape.every((d) => typeof d === 'number' && Number.isInteger(d) && d >= 0 && d <= 2 ** 40))
      throw bad(`${tname}: shape must be a list of non-negative integers`);
    const offs = meta.data_offsets;
    if (!Array.isArray(offs) || offs.length !== 2 || !offs.every((o) => typeof o === 'number' && Number.isInteger(o) && o >= 0))
      throw bad(`${tname}: data_offsets must be two non-negative integers`);
    const [b, e] = offs as number[];
    const numel = (shape as number[]).reduce((a, d) => a * d, 1);
    const bytes = numel * DTYPE_BYTES[dtype as Dtype];
    if (e < b || e > dataSize) throw bad(`${tname}: data_offsets [${b}, ${e}] fall outside the ${dataSize} data bytes`);
    if (e - b !== bytes) throw bad(`${tname}: shape [${shape}] of ${dtype} needs ${bytes} bytes, data_offsets give ${e - b}`);
    tensors.set(tname, { name: tname, dtype: dtype as Dtype, shape: shape as number[], file, offset: dataStart + b, bytes });
  }
  return tensors;
}

/** The length of a safetensors header from its first 8 bytes, bounded (the header is untrusted). */
export function headerLength(first8: Uint8Array, file: string): number {
  const n = Number(Buffer.from(first8.buffer, first8.byteOffset, 8).readBigUInt64LE(0));
  if (n < 2 || n > MAX_HEADER) throw new WasteError('E_FORMAT', `${file}: header length ${n} is not that of a safetensors file`);
  return n;
}
