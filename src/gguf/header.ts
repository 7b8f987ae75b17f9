import * as fs from 'node:fs';
import { WasteError } from '../util/errors.js';
import { openRegular } from '../util/read.js';
import { FileCursor } from './cursor.js';
import { type GgmlType, ggmlType } from './ggml-types.js';
import { FIXED_BYTES, type GgufArray, type GgufValue, type GgufValueType, VALUE_TYPES } from './values.js';

/**
 * The header of a GGUF file (versions 2 and 3, little-endian): its metadata and where each tensor
 * lies. Only the header's bytes are read, through a bounded window (cursor.ts); every count,
 * length, offset, type and shape is bounded and checked before anything is allocated for it or
 * read through it, and anything malformed or unsupported is one WasteError naming the file and the
 * field. Reading the tensors themselves, and split (-0000N-of-0000M) sets, come later.
 *
 * Why not @huggingface/gguf (rule 6): it trusts the file. Its array and string lengths drive loops
 * and slices with no bound against the bytes that remain, so a count of 2^63 runs until its 50 MB
 * buffer cap throws a RangeError; it reads ahead in 2 MB chunks into one growing buffer (re-opening
 * the file for each chunk), checks no offset, alignment, overlap or tensor type, accepts a bool of
 * 7 and GGUF v1, keeps the metadata in a plain object whose keys come from the file (a key named
 * `version` or `__proto__` overwrites what the parser set), and fails with bare Errors that name
 * neither the file nor the field. Making it fit rule 3 would mean rewriting its parser, so this is
 * our own.
 */
export interface GgufHeader {
  file: string;
  version: 2 | 3;
  /** The file's size in bytes. */
  fileBytes: number;
  /** Every key, in the file's order. */
  metadata: Map<string, GgufValue>;
  tensors: GgufTensorInfo[];
  /** `general.alignment`, or 32. */
  alignment: number;
  /** Where the tensor data begins: the end of the tensor infos, aligned. */
  dataStart: number;
}

export interface GgufTensorInfo {
  name: string;
  /** ggml's order: dims[0] is the row length (the fastest-varying dimension). */
  dims: number[];
  type: GgmlType;
  /** Bytes from `dataStart`, a multiple of the alignment. */
  offset: number;
  /** Bytes from the start of the file. */
  start: number;
  bytes: number;
  elements: number;
}

export interface ReadGgufOptions {
  /** The most of the file the header may take (default 256 MiB; a large vocabulary's is tens of MB). */
  maxHeaderBytes?: number;
  /** The most strings the metadata may hold, arrays' included (default 4 Mi). */
  maxStrings?: number;
  signal?: AbortSignal;
}

export const DEFAULT_ALIGNMENT = 32;
export const MAX_HEADER_BYTES = 256 << 20;
const MAX_STRINGS = 4 << 20;
const MAX_TENSORS = 1 << 20;
const MAX_KEYS = 1 << 16;
/** The format's limits: a key of at most 65535 bytes, a tensor name of at most 64, at most 4 dimensions. */
const MAX_KEY_BYTES = 65535;
const MAX_NAME_BYTES = 64;
const MAX_DIMS = 4;
const MAX_STRING_BYTES = 16 << 20;
const MAX_ARRAY_DEPTH = 4;
const MAX_ALIGNMENT = 1 << 30;
/** The smallest a metadata pair can be (a one-byte key, its type, a one-byte value) and a tensor info (a one-byte name, one dimension). */
const MIN_KV_BYTES = 8 + 1 + 4 + 1;
const MIN_TENSOR_INFO_BYTES = 8 + 1 + 4 + 8 + 4 + 8;
const MAGIC = Buffer.from('GGUF', 'latin1');
const SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** A string from the file, as an error quotes it: JSON-escaped and cut short. */
function quote(s: string): string {
  return JSON.stringify(s.length > 48 ? `${s.slice(0, 48)}…` : s);
}

/** Read and check the header of the GGUF file `file`. */
export async function readGgufHeader(file: string, opts: ReadGgufOptions = {}): Promise<GgufHeader> {
  const { fd, size } = openRegular(file);
  try {
    return await new HeaderReader(fd, file, size, opts).read();
  } finally {
    fs.closeSync(fd);
  }
}

class HeaderReader {
  private readonly c: FileCursor;
  private strings = 0;
  private readonly maxStrings: number;
  private readonly utf8 = new TextDecoder('utf-8', { fatal: true });

  constructor(
    fd: number,
    private readonly file: string,
    private readonly size: number,
    opts: ReadGgufOptions,
  ) {
    this.c = new FileCursor(fd, file, size, Math.min(size, opts.maxHeaderBytes ?? MAX_HEADER_BYTES), (where, what) => this.fail(where, what), opts.signal);
    this.maxStrings = opts.maxStrings ?? MAX_STRINGS;
  }

  private fail(where: string, what: string): WasteError {
    return new WasteError('E_FORMAT', `${this.file}: ${where} ${what}`);
  }

  private unsupported(where: string, what: string): WasteError {
    return new WasteError('E_UNSUPPORTED', `${this.file}: ${where}: ${what}`);
  }

  private async need(n: number, where: string): Promise<void> {
    if (!this.c.has(n)) await this.c.fill(n, where);
  }

  /** The bytes left for the header: to the end of the file, or to the header's bound if that comes first. */
  private get room(): number {
    return this.c.limit - this.c.pos;
  }

  /** A 64-bit count, at most `max` and at most what the room left can hold at `each` bytes an item. */
  private async count(where: string, each: number, max: number, what: string): Promise<number> {
    await this.need(8, where);
    const n = this.c.u64();
    const fits = Math.floor(Math.max(0, this.room) / each);
    if (n > BigInt(Math.min(max, fits)))
      throw this.fail(where, `is ${n}; ${fits < max ? `the ${Math.max(0, this.room)} bytes left for the header hold at most ${fits} ${what}` : `this reader takes at most ${max} ${what}`}`);
    return Number(n);
  }

  private async string(where: string, maxBytes: number): Promise<string> {
    const len = await this.count(`${where} (its length)`, 1, maxBytes, 'bytes');
    await this.need(len, where);
    try {
      return this.utf8.decode(this.c.take(len));
    } catch {
      throw this.fail(where, 'is not valid UTF-8');
    }
  }

  /**
   * The string at the next byte when it is whole in the window and within its bounds, without an
   * await (a vocabulary is hundreds of thousands of them); otherwise undefined, and `string` reads
   * it or names what is wrong with it.
   */
  private stringNow(maxBytes: number): string | undefined {
    const c = this.c;
    if (!c.has(8)) return undefined;
    const len = c.peekU64();
    if (len > BigInt(maxBytes) || !c.has(8 + Number(len))) return undefined;
    const at = c.pos;
    c.take(8);
    try {
      return this.utf8.decode(c.take(Number(len)));
    } catch {
      c.pos = at;
      return undefined;
    }
  }

  async read(): Promise<GgufHeader> {
    const { c, file, size } = this;
    if (size < 24) {
      if (size >= 4) await this.need(4, 'the magic number');
      const head = size >= 4 ? c.take(4) : Buffer.alloc(0);
      if (size < 4 || !head.equals(MAGIC)) throw this.fail('the file', `is ${size} bytes, not a GGUF file (one starts with "GGUF" and a 24-byte header)`);
      throw this.fail('the header', `runs past the end of the file (${size} bytes; a GGUF header takes 24)`);
    }
    await this.need(24, 'the header');
    const magic = c.take(4);
    if (!magic.equals(MAGIC)) throw this.fail('the file', `does not start with GGUF's magic number "GGUF" (it starts with bytes ${magic.toString('hex')})`);
    const version = c.u32();
    if (version !== 2 && version !== 3) {
      const be = Buffer.alloc(4);
      be.writeUInt32LE(version);
      const big = be.readUInt32BE(0);
      if (big >= 1 && big <= 3) throw this.unsupported('header.version', 'a big-endian GGUF file; this build reads little-endian ones');
      if (version === 1) throw this.unsupported('header.version', 'GGUF version 1 (32-bit counts, before August 2023); convert the model again with a current llama.cpp');
      throw this.fail('header.version', `is ${version}; this build reads GGUF versions 2 and 3`);
    }
    const tensorCount = await this.count('header.tensor_count', MIN_TENSOR_INFO_BYTES, MAX_TENSORS, 'tensor infos');
    const kvCount = await this.count('header.metadata_kv_count', MIN_KV_BYTES, MAX_KEYS, 'metadata pairs');

    const metadata = new Map<string, GgufValue>();
    for (let i = 0; i < kvCount; i++) {
      const key = await this.string(`metadata[${i}].key`, MAX_KEY_BYTES);
      if (!/^[\x20-\x7e]+$/.test(key)) throw this.fail(`metadata[${i}].key`, `${quote(key)} is not a key (printable ASCII, 1 to ${MAX_KEY_BYTES} bytes)`);
      const where = `metadata[${i}] (${quote(key)})`;
      if (metadata.has(key)) throw this.fail(where, 'appears twice');
      await this.need(4, `${where}.value_type`);
      const type = this.valueType(c.u32(), `${where}.value_type`);
      metadata.set(key, await this.value(type, `${where}.value`));
    }

    const alignment = this.alignment(metadata);

    const tensors: GgufTensorInfo[] = [];
    const names = new Set<string>();
    for (let i = 0; i < tensorCount; i++) {
      const name = await this.string(`tensor_infos[${i}].name`, MAX_NAME_BYTES);
      if (name.length === 0) throw this.fail(`tensor_infos[${i}].name`, 'is empty');
      const where = `tensor_infos[${i}] (${quote(name)})`;
      if (names.has(name)) throw this.fail(where, 'names a tensor twice');
      names.add(name);
      await this.need(4, `${where}.n_dimensions`);
      const nd = c.u32();
      if (nd < 1 || nd > MAX_DIMS) throw this.fail(`${where}.n_dimensions`, `is ${nd}; a tensor has 1 to ${MAX_DIMS}`);
      const dims: number[] = [];
      let elements = 1;
      for (let d = 0; d < nd; d++) {
        await this.need(8, `${where}.dimensions[${d}]`);
        const v = c.u64();
        if (v < 1n || v > SAFE) throw this.fail(`${where}.dimensions[${d}]`, `is ${v}; a dimension is 1 to 2^53 - 1`);
        const dim = Number(v);
        if (elements > Number.MAX_SAFE_INTEGER / dim) throw this.fail(`${where}.dimensions`, `[${dims.join(', ')}, ${dim}…] make more than 2^53 elements`);
        elements *= dim;
        dims.push(dim);
      }
      await this.need(12, `${where}.type`);
      const id = c.u32();
      const type = ggmlType(id);
      if ('refused' in type) throw this.unsupported(`${where}.type`, type.refused);
      if (dims[0] % type.blockElements !== 0) throw this.fail(`${where}.dimensions[0]`, `is ${dims[0]}; a row of ${type.name} is whole blocks of ${type.blockElements} values`);
      const blocks = elements / type.blockElements;
      if (blocks > size / type.blockBytes) throw this.fail(`${where}.dimensions`, `[${dims.join(', ')}] of ${type.name} need more bytes than the whole file has (${size})`);
      const bytes = blocks * type.blockBytes;
      const off = c.u64();
      if (off > SAFE) throw this.fail(`${where}.offset`, `is ${off}, past any file`);
      const offset = Number(off);
      if (offset % alignment !== 0) throw this.fail(`${where}.offset`, `is ${offset}, not a multiple of the alignment ${alignment}`);
      tensors.push({ name, dims, type, offset, start: 0, bytes, elements });
    }

    const dataStart = Math.ceil(c.pos / alignment) * alignment;
    if (tensors.length > 0 && dataStart > size) throw this.fail('the tensor data', `would start at byte ${dataStart}, past the end of the file (${size} bytes)`);
    tensors.forEach((t, i) => {
      t.start = dataStart + t.offset;
      if (t.start + t.bytes > size)
        throw this.fail(`tensor_infos[${i}] (${quote(t.name)}).offset`, `puts its ${t.bytes} bytes at ${t.start}..${t.start + t.bytes}, past the end of the file (${size} bytes)`);
    });
    const order = tensors.map((t, i) => ({ t, i })).sort((a, b) => a.t.offset - b.t.offset);
    for (let k = 1; k < order.length; k++) {
      const [a, b] = [order[k - 1], order[k]];
      if (a.t.offset + a.t.bytes > b.t.offset)
        throw this.fail(
          `tensor_infos[${b.i}] (${quote(b.t.name)}).offset`,
          `puts it at bytes ${b.t.offset}..${b.t.offset + b.t.bytes} of the data, overlapping tensor_infos[${a.i}] (${quote(a.t.name)}) at ${a.t.offset}..${a.t.offset + a.t.bytes}`,
        );
    }
    return { file, version, fileBytes: size, metadata, tensors, alignment, dataStart };
  }

  private valueType(n: number, where: string): GgufValueType {
    const t = VALUE_TYPES[n];
    if (t === undefined) throw this.fail(where, `is ${n}, not a GGUF value type (0 to ${VALUE_TYPES.length - 1})`);
    return t;
  }

  /** `general.alignment`: a uint32, a power of two of at least 8 (the format says a multiple of 8; ggml, a power of two). */
  private alignment(metadata: Map<string, GgufValue>): number {
    const v = metadata.get('general.alignment');
    if (v === undefined) return DEFAULT_ALIGNMENT;
    const where = 'metadata "general.alignment"';
    if (v.type !== 'u32') throw this.fail(where, `is a ${v.type}; it is a u32`);
    const a = v.value;
    if (a < 8 || a > MAX_ALIGNMENT || (a & (a - 1)) !== 0) throw this.fail(where, `is ${a}; the alignment is a power of two from 8 to 2^30`);
    return a;
  }

  private async value(type: GgufValueType, where: string, depth = 0): Promise<GgufValue> {
    const c = this.c;
    switch (type) {
      case 'string':
        this.countString(where);
        return { type, value: await this.string(where, MAX_STRING_BYTES) };
      case 'array':
        return { type, value: await this.array(where, depth) };
      case 'bool': {
        await this.need(1, where);
        return { type, value: this.bool(c.u8(), where) };
      }
      case 'u64':
      case 'i64': {
        await this.need(8, where);
        const b = c.take(8);
        return { type, value: type === 'u64' ? b.readBigUInt64LE(0) : b.readBigInt64LE(0) };
      }
      default: {
        const n = FIXED_BYTES[type];
        await this.need(n, where);
        return { type, value: NUMBER[type](c.take(n), 0) };
      }
    }
  }

  private countString(where: string): void {
    if (++this.strings > this.maxStrings) throw this.fail(where, `is string number ${this.strings}; this reader takes at most ${this.maxStrings} strings in a header`);
  }

  private bool(b: number, where: string): boolean {
    if (b > 1) throw this.fail(where, `is ${b}; a bool is 0 or 1`);
    return b === 1;
  }

  private async array(where: string, depth: number): Promise<GgufArray> {
    const c = this.c;
    await this.need(4, `${where} (its element type)`);
    const of = this.valueType(c.u32(), `${where} (its element type)`);
    if (of === 'array' && depth + 1 >= MAX_ARRAY_DEPTH) throw this.unsupported(where, `arrays nested more than ${MAX_ARRAY_DEPTH} deep`);
    const n = await this.count(`${where} (its length)`, FIXED_BYTES[of], Number.MAX_SAFE_INTEGER, 'elements');
    switch (of) {
      case 'string': {
        if (this.strings + n > this.maxStrings) throw this.fail(`${where} (its length)`, `is ${n}; this reader takes at most ${this.maxStrings} strings in a header`);
        const values: string[] = [];
        for (let i = 0; i < n; i++) {
          this.countString(`${where}[${i}]`);
          values.push(this.stringNow(MAX_STRING_BYTES) ?? (await this.string(`${where}[${i}]`, MAX_STRING_BYTES)));
        }
        return { of, values };
      }
      case 'array': {
        const values: GgufArray[] = [];
        for (let i = 0; i < n; i++) values.push(await this.array(`${where}[${i}]`, depth + 1));
        return { of, values };
      }
      case 'bool': {
        const values: boolean[] = [];
        await this.each(n, 1, where, (b, i) => values.push(this.bool(b[0], `${where}[${i}]`)));
        return { of, values };
      }
      case 'u64':
      case 'i64': {
        const values = of === 'u64' ? new BigUint64Array(n) : new BigInt64Array(n);
        await this.each(n, 8, where, (b, i) => (values[i] = of === 'u64' ? b.readBigUInt64LE(0) : b.readBigInt64LE(0)));
        return { of, values } as GgufArray;
      }
      default: {
        const values = new ARRAY[of](n);
        const read = NUMBER[of];
        await this.each(n, FIXED_BYTES[of], where, (b, i) => (values[i] = read(b, 0)));
        return { of, values } as GgufArray;
      }
    }
  }

  /** Visit `n` fixed-size elements of `each` bytes, refilling the window a megabyte at a time. */
  private async each(n: number, each: number, where: string, visit: (b: Buffer, i: number) => void): Promise<void> {
    for (let i = 0; i < n; i++) {
      if (!this.c.has(each)) await this.c.fill(Math.min((n - i) * each, 1 << 20), `${where}[${i}]`);
      visit(this.c.take(each), i);
    }
  }
}

type NumberType = 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'f32' | 'f64';

const NUMBER: Record<NumberType, (b: Buffer, at: number) => number> = {
  u8: (b, at) => b.readUInt8(at),
  i8: (b, at) => b.readInt8(at),
  u16: (b, at) => b.readUInt16LE(at),
  i16: (b, at) => b.readInt16LE(at),
  u32: (b, at) => b.readUInt32LE(at),
  i32: (b, at) => b.readInt32LE(at),
  f32: (b, at) => b.readFloatLE(at),
  f64: (b, at) => b.readDoubleLE(at),
};

const ARRAY = { u8: Uint8Array, i8: Int8Array, u16: Uint16Array, i16: Int16Array, u32: Uint32Array, i32: Int32Array, f32: Float32Array, f64: Float64Array };
