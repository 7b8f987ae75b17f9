import { WasteError } from '../util/errors.js';
import { type GgmlType, GGML_TYPES, ggmlTypeByName } from './ggml-types.js';
import { DEFAULT_ALIGNMENT } from './header.js';
import { FIXED_BYTES, type GgufArray, type GgufValue, VALUE_TYPES } from './values.js';

/**
 * A small GGUF writer (version 3, little-endian), in memory: what the tests need to make valid
 * files to read and then damage. Tensor data is the given bytes, or zeros.
 */
export interface GgufTensorSpec {
  name: string;
  /** ggml's order: dims[0] is the row length. */
  dims: number[];
  /** A type's name (`Q4_K`) or number. */
  type: string | number;
  /** Exactly the tensor's bytes; zeros when absent. */
  data?: Uint8Array;
}

export interface GgufFileSpec {
  version?: 2 | 3;
  metadata?: [string, GgufValue][];
  tensors?: GgufTensorSpec[];
  /** Written as `general.alignment` (a u32) when given and not already in the metadata. */
  alignment?: number;
  /** Stop where the tensor data would start (for a test that makes the data a sparse hole). */
  headerOnly?: boolean;
}

/** The bytes of a GGUF file as `spec` describes it. */
export function encodeGguf(spec: GgufFileSpec): Uint8Array {
  const out = new Writer();
  const metadata = [...(spec.metadata ?? [])];
  if (spec.alignment !== undefined && !metadata.some(([k]) => k === 'general.alignment')) metadata.unshift(['general.alignment', { type: 'u32', value: spec.alignment }]);
  const alignment = spec.alignment ?? DEFAULT_ALIGNMENT;
  const tensors = (spec.tensors ?? []).map((t) => ({ ...t, info: typeOf(t.type) }));

  out.bytes(Buffer.from('GGUF', 'latin1'));
  out.u32(spec.version ?? 3);
  out.u64(tensors.length);
  out.u64(metadata.length);
  for (const [key, value] of metadata) {
    out.string(key);
    out.u32(VALUE_TYPES.indexOf(value.type));
    out.value(value);
  }
  let offset = 0;
  const placed: { at: number; bytes: number; data?: Uint8Array }[] = [];
  for (const t of tensors) {
    const elements = t.dims.reduce((a, b) => a * b, 1);
    const bytes = (elements / t.info.blockElements) * t.info.blockBytes;
    if (!Number.isInteger(bytes)) throw new WasteError('E_ARG', `${t.name}: ${t.dims.join(' x ')} is not whole blocks of ${t.info.name}`);
    if (t.data && t.data.length !== bytes) throw new WasteError('E_ARG', `${t.name}: ${t.data.length} bytes of data for ${bytes}`);
    out.string(t.name);
    out.u32(t.dims.length);
    for (const d of t.dims) out.u64(d);
    out.u32(t.info.id);
    out.u64(offset);
    placed.push({ at: offset, bytes, data: t.data });
    offset = Math.ceil((offset + bytes) / alignment) * alignment;
  }
  out.pad(alignment);
  const dataStart = out.length;
  if (spec.headerOnly) return out.done();
  for (const p of placed) {
    out.pad(alignment);
    if (p.data) out.bytes(p.data);
    else out.zeros(p.bytes);
  }
  if (out.length !== dataStart + (placed.length ? placed[placed.length - 1].at + placed[placed.length - 1].bytes : 0)) throw new WasteError('E_ARG', 'the tensors were not laid out as their offsets say');
  return out.done();
}

function typeOf(type: string | number): GgmlType {
  const t = typeof type === 'number' ? GGML_TYPES.get(type) : ggmlTypeByName(type);
  if (!t) throw new WasteError('E_ARG', `no GGML type ${type}`);
  return t;
}

class Writer {
  private buf = Buffer.alloc(1 << 16);
  length = 0;

  /** Room for `n` more bytes (doubling), and where they go. */
  private grow(n: number): number {
    if (this.length + n > this.buf.length) {
      const next = Buffer.alloc(Math.max(this.length + n, 2 * this.buf.length));
      this.buf.copy(next, 0, 0, this.length);
      this.buf = next;
    }
    const at = this.length;
    this.length += n;
    return at;
  }

  /** `n` zero bytes (the buffer is allocated zeroed and never written past `length`). */
  zeros(n: number): void {
    this.grow(n);
  }

  bytes(b: Uint8Array): void {
    const at = this.grow(b.length);
    this.buf.set(b, at);
  }

  private fixed(n: number, put: (b: Buffer) => void): void {
    const at = this.grow(n);
    put(this.buf.subarray(at, at + n));
  }

  u32(v: number): void {
    this.fixed(4, (b) => b.writeUInt32LE(v));
  }

  u64(v: number | bigint): void {
    this.fixed(8, (b) => b.writeBigUInt64LE(BigInt(v)));
  }

  string(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.bytes(b);
  }

  pad(alignment: number): void {
    this.grow((alignment - (this.length % alignment)) % alignment);
  }

  value(v: GgufValue): void {
    switch (v.type) {
      case 'string':
        return this.string(v.value);
      case 'bool':
        return this.fixed(1, (b) => b.writeUInt8(v.value ? 1 : 0));
      case 'array':
        return this.array(v.value);
      case 'u64':
        return this.fixed(8, (b) => b.writeBigUInt64LE(v.value));
      case 'i64':
        return this.fixed(8, (b) => b.writeBigInt64LE(v.value));
      default:
        return this.number(v.type, v.value);
    }
  }

  private number(type: 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'f32' | 'f64', v: number): void {
    this.fixed(FIXED_BYTES[type], (b) => {
      if (type === 'u8') b.writeUInt8(v);
      else if (type === 'i8') b.writeInt8(v);
      else if (type === 'u16') b.writeUInt16LE(v);
      else if (type === 'i16') b.writeInt16LE(v);
      else if (type === 'u32') b.writeUInt32LE(v);
      else if (type === 'i32') b.writeInt32LE(v);
      else if (type === 'f32') b.writeFloatLE(v);
      else b.writeDoubleLE(v);
    });
  }

  private array(a: GgufArray): void {
    this.u32(VALUE_TYPES.indexOf(a.of));
    this.u64(a.values.length);
    const values = a.values as ArrayLike<unknown>;
    for (let i = 0; i < values.length; i++) {
      if (a.of === 'array') this.array(values[i] as GgufArray);
      else this.value({ type: a.of, value: values[i] } as GgufValue);
    }
  }

  done(): Uint8Array {
    return this.buf.subarray(0, this.length);
  }
}
